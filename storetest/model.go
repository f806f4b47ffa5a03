package storetest

import (
	"fmt"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// The lease-aware fenced-mutex model that histories are checked against.
// Times are nanoseconds on the test's monotonic clock, which runs at the
// store clock's rate up to Rho. An operation took effect at some instant
// within [Call, Return]; the model keeps the window of the last grant or
// renewal, [lo, hi], and judges expiry against it:
//
//   - the lease may have expired at t if t >= lo + TTL*(1-Rho) - Slack;
//   - it may still be alive at t if t < hi + TTL*(1+Rho) + Slack.
//
// A grant is legal if the lease is free or may have expired, and its token
// is strictly greater than every earlier token; a retried acquire (same
// owner and request id as the holder) may get the holder's token back while
// the lease may be alive. A "held" answer must name the current holder and
// token while the lease may be alive. Renew needs owner and token of a lease
// that may be alive; release needs owner and token of the latest grant.
// An indeterminate operation may or may not have taken effect; an
// indeterminate acquire may also have been granted and then undone by the
// store (the caller, told of an error, never believed it held the lease).
//
// A "lose" operation is not a client's: the harness records one per name
// when an engine that may lose acknowledged writes (Redis without
// persistence, or with RDB snapshots) was killed and restarted, from the
// kill to the restart. It may have lost nothing, or the lease and its
// fence: then no one holds the lease or its latest grant any more (renewals
// and releases are refused), but the time and token rules stay as they
// were. Or it may have lost only the latest renewals (a replica promoted
// with the grant but not the renewals after it): the grant stays the latest
// (its release succeeds), a renewal may be refused at any moment, and a
// grant to someone else still waits for the renewed lease's end. A grant still needs the lost holder's lease to have expired by its
// own call times (what Redis's hold-back promises) and a token above every
// earlier one (its token floor).
//
// A "wait" is an AcquireWait of a store that queues waiters
// (leasehold.Queuer), bounded by a short context. Granted, it is a grant
// like any other, linearised at some instant inside its interval (a
// release that hands the lease to the waiter in the same step is a
// release followed at once by that grant). Ended by its context, it has no
// effect of its own; the recorder adds a "raced" operation beside it, from
// the wait's call to the moment by which the store must have freed a grant
// that raced with the end (the contract: "releases a grant that raced with
// the end"): the wait's return, or a little later for a store whose server
// learns of the end only when the client's connection closes
// (HistoryConfig.WaitCleanup). A raced operation either did nothing or
// granted the lease to the waiter (its token unknown, above every earlier
// one), a grant that may be seen held until the raced operation's return
// and may have been freed at any moment from the grant on (FreedBy). A TryAcquire refused with a
// token of 0 names the head of the queue of a free lease: legal only if
// the lease may be free at some instant of the refusal and the owner it
// names had a wait in progress at some instant of it (Queued, marked from
// the whole history by markQueued).
//
// An "unheard" operation is an acquire without an answer on a store that
// ends such a grant itself (the etcd store revokes the etcd lease of an
// acquire whose reply never came, or whose spare lease's refresh failed:
// endUnheard in etcd/ops.go). It did nothing, or granted the lease to the
// caller (its token unknown, above every earlier one) no earlier than the
// previous lease may have ended, a grant others may see held for a while
// and that may end at any moment after it was made, however early: the
// caller was told of an error and never believed it held the lease.
//
// An "undone" operation is an acquire the store answered by undoing the
// grant it had made (the Redis store's grant made across a reconnect to a
// restarted server, on facts that restart had changed): like a raced one,
// it either did nothing or granted the lease to the caller (its token
// unknown), freed again by its return. Or, since such a grant was undone
// because it may have broken the rules (inside a hold-back, a token below
// the floor, on a promoted replica that lacked the holder's grant), it was
// a ghost: seen held by others until its return, with any token, while
// the lease's state stayed what it was.
//
// A "handed" operation is added beside a granted wait when the history
// names the waiter holding a token below the one its wait returned, a
// token it was never told of: a release handed the lease to the waiting
// owner, the grant expired before the waiter's next step collected it (a
// slow client on a loaded machine), and that step took the free lease
// again with the next token. It either did nothing or granted the lease
// to the waiter inside the wait's interval (its token unknown), a lease
// that lives for its TTL like any other; the wait's own grant then
// follows it as the caller's grant made again (see regrant).
//
// What the model leaves permissive, because a client cannot see when the
// engine enqueued a wait (anywhere between its call and its return): the
// order in which waits are granted, and whether a TryAcquire that took a
// free lease did so ahead of a queued wait. The queue subtests of Run
// (QueueFIFO, QueueNoOvertake) check those with waiters known to be
// queued.

// Rho is the clock-rate error the model allows between the test's clock and
// the store's.
const Rho = 0.01

// Slack is the fixed timing tolerance the model allows.
const Slack = time.Millisecond

type opKind int

const (
	opAcquire opKind = iota
	opRenew
	opRelease
	opLose
	opWait
	opRaced   // the grant a wait ended by its context may have raced with
	opUndone  // an acquire whose grant the store undid before answering
	opHanded  // a grant handed to a wait that expired before the wait collected it
	opUnheard // an acquire without an answer whose grant the store ends itself
)

func (k opKind) String() string {
	return [...]string{"acquire", "renew", "release", "lose", "wait", "raced grant of a wait", "acquire undone", "grant handed to a wait, not collected", "unheard acquire"}[k]
}

// lostOwner is the owner of a lease whose state the store lost: it matches
// no client.
const lostOwner = "\x00lost"

// opInput is what a client asked.
type opInput struct {
	Kind      opKind
	Owner     string
	RequestID string
	Token     uint64 // renew, release
	TTL       int64
	Call      int64
	// Again marks the second opRaced beside a wait ended by its context:
	// the grant its give-up may make anew (see racedOps).
	Again bool
}

// opOutput is what it got back.
type opOutput struct {
	OK          bool   // granted / renewed / released
	Token       uint64 // acquire: granted token, or the holder's token when held
	HolderOwner string // acquire when held
	Unknown     bool   // indeterminate: no definite answer
	Return      int64
	// Queued: acquire refused with Token 0, naming HolderOwner as the
	// head of the queue; an AcquireWait by HolderOwner was in progress at
	// some instant of this operation (markQueued).
	Queued bool
}

type modelState struct {
	Token      uint64 // latest grant (a lower bound if TokenLower)
	TokenLower bool
	Owner      string
	RequestID  string
	Held       bool
	Lo, Hi     int64
	TTL        int64
	// FreedBy, if not 0: the grant was released again at some moment
	// after it was made, at the latest at FreedBy (a wait that ended by
	// its context gave back a grant it raced with).
	FreedBy int64
	// RenewLost: a "lose" may have undone the renewals of the latest
	// grant in the engine; the holder's renewals may be refused before the
	// lease's end the model knows (the grant and its fence remain).
	RenewLost bool
	// NotBefore: the latest grant was made by an indeterminate wait no
	// earlier than this moment (its call, or the previous lease's earliest
	// end): every operation after it returned later. (Only for waits: the
	// fault suites' long histories of indeterminate acquires went
	// undecided with more distinct states.)
	NotBefore int64
	// GhostOwner: an "undone" grant to this owner that broke the rules
	// (made on facts a restart had changed) may be seen held by others
	// until GhostUntil (its return); it changes nothing else.
	GhostOwner string
	GhostUntil int64
}

func mayBeExpired(s modelState, t int64) bool {
	return !s.Held || s.FreedBy != 0 || t >= s.Lo+int64(float64(s.TTL)*(1-Rho))-int64(Slack)
}

func mayBeAlive(s modelState, t int64) bool {
	return s.Held && t < s.Hi+int64(float64(s.TTL)*(1+Rho))+int64(Slack) && (s.FreedBy == 0 || t < s.FreedBy)
}

func tokenAbove(s modelState, t uint64) bool { return t > s.Token }

// never is the Return of an indeterminate operation (its answer never came).
const never = int64(1) << 62

// earliestFree is the earliest moment at which the lease of s may be free.
func earliestFree(s modelState) int64 {
	if !s.Held || s.FreedBy != 0 {
		return 0
	}
	return s.Lo + int64(float64(s.TTL)*(1-Rho)) - int64(Slack)
}

func stepModel(st, in, out interface{}) []interface{} {
	s, i, o := st.(modelState), in.(opInput), out.(opOutput)
	if i.Kind == opLose {
		lost := s
		lost.Owner, lost.RequestID = lostOwner, ""
		res := []interface{}{s, lost}
		if s.Held && !s.RenewLost {
			shaky := s
			shaky.RenewLost = true
			res = append(res, shaky)
		}
		return res
	}
	if !o.Unknown && o.Return < s.NotBefore {
		return nil // linearised before the grant it must follow
	}
	if s.GhostOwner != "" && i.Call >= s.GhostUntil {
		// Undone before this operation began: no later one can see it.
		s.GhostOwner, s.GhostUntil = "", 0
	}
	if o.Unknown {
		res := []interface{}{s}
		if next, ok := unknownEffect(s, i); ok {
			res = append(res, next)
			switch i.Kind {
			case opAcquire:
				// A store may undo a grant it could not confirm before
				// answering with an error (Redis does when a reconnect
				// happened during the acquire): granted, then freed.
				undone := next
				undone.Held = false
				res = append(res, undone)
			case opWait, opUnheard:
				// An AcquireWait that fails gives back what it was handed,
				// and a store that ends unanswered grants ends them:
				// granted, seen held by others for a while, then freed at
				// some moment before the answer, which never came. The
				// grant itself came no earlier than the previous lease may
				// have ended (NotBefore). For an unheard acquire this
				// replaces the grant that stands (it allows all that one
				// does, the early end besides).
				freed := next
				freed.FreedBy = never
				freed.NotBefore = max(i.Call, earliestFree(s))
				if i.Kind == opUnheard {
					res = res[:1]
				}
				res = append(res, freed)
			}
		}
		return res
	}
	switch i.Kind {
	case opWait:
		if o.OK {
			break // a grant: as an acquire's, below
		}
		return []interface{}{s} // ended by its context: see its opRaced
	case opHanded:
		// Nothing, or a grant to the waiter that it never collected.
		res := []interface{}{s}
		if mayBeExpired(s, o.Return) {
			res = append(res, modelState{Token: s.Token + 1, TokenLower: true, Owner: i.Owner, RequestID: i.RequestID,
				Held: true, Lo: i.Call, Hi: o.Return, TTL: i.TTL})
		}
		return res
	case opRaced, opUndone:
		// Nothing, or a grant to the caller, freed by o.Return.
		res := []interface{}{s}
		if mayBeExpired(s, o.Return) {
			res = append(res, modelState{Token: s.Token + 1, TokenLower: true, Owner: i.Owner, RequestID: i.RequestID,
				Held: true, Lo: i.Call, Hi: o.Return, TTL: i.TTL, FreedBy: o.Return})
		}
		if i.Kind == opUndone {
			// Or a grant the store made on facts an engine restart had
			// changed (the very reason it undid it): it broke the rules,
			// so it may have come while the holder's lease lived, with
			// any token, and others may have seen it held until the undo
			// returned; the lease's state is as before it.
			g := s
			g.GhostOwner, g.GhostUntil = i.Owner, o.Return
			res = append(res, g)
		}
		return res
	}
	switch i.Kind {
	case opAcquire, opWait:
		if o.OK {
			// A retry with the same request id gets its grant back: one
			// it was told of (the same token), or one an acquire left
			// without an answer made, whose token it learns now (at
			// least the lower bound).
			retry := s.Held && s.Owner == i.Owner && s.RequestID == i.RequestID && i.RequestID != "" &&
				(o.Token == s.Token && !s.TokenLower || s.TokenLower && o.Token >= s.Token) && mayBeAlive(s, i.Call)
			fresh := tokenAbove(s, o.Token) && mayBeExpired(s, o.Return)
			// The caller's own grant from an indeterminate acquire, undone
			// by the store and granted again with a higher token.
			regrant := s.Held && s.TokenLower && s.Owner == i.Owner && tokenAbove(s, o.Token)
			if !retry && !fresh && !regrant {
				return nil
			}
			return []interface{}{modelState{Token: o.Token, Owner: i.Owner, RequestID: i.RequestID, Held: true, Lo: i.Call, Hi: o.Return, TTL: i.TTL}}
		}
		if o.Token == 0 && o.Queued && mayBeExpired(s, o.Return) {
			// Refused on a free lease for the head of its queue.
			return []interface{}{s}
		}
		if s.GhostOwner != "" && o.HolderOwner == s.GhostOwner && i.Call < s.GhostUntil {
			return []interface{}{s} // the undone grant, seen before it was undone
		}
		sameHolder := o.HolderOwner == s.Owner && (o.Token == s.Token || s.TokenLower && o.Token >= s.Token)
		if !sameHolder || !mayBeAlive(s, i.Call) {
			return nil
		}
		return []interface{}{s}
	case opRenew:
		mine := s.Held && s.Owner == i.Owner && s.Token == i.Token && !s.TokenLower
		if o.OK {
			if !mine && !maybeOwn(s, i) || !mayBeAlive(s, i.Call) {
				return nil
			}
			n := s
			n.Lo, n.Hi, n.TTL = i.Call, o.Return, i.TTL
			n.Token, n.TokenLower = i.Token, false
			n.RenewLost = false
			return []interface{}{n}
		}
		if mine && !s.RenewLost && !mayBeExpired(s, o.Return) {
			return nil
		}
		return []interface{}{s}
	case opRelease:
		latest := s.Owner == i.Owner && s.Token == i.Token && !s.TokenLower
		if o.OK {
			if !latest && !maybeOwn(s, i) {
				return nil
			}
			n := s
			n.Held, n.FreedBy, n.RenewLost = false, 0, false
			n.Token, n.TokenLower = i.Token, false
			return []interface{}{n}
		}
		if latest {
			return nil
		}
		return []interface{}{s}
	}
	return nil
}

// maybeOwn reports whether i (a renew or release) may name the latest
// grant when the model knows only a lower bound of its token: a grant made
// to i.Owner by an indeterminate acquire or a raced wait, whose token the
// owner can still learn (a refusal names it).
func maybeOwn(s modelState, i opInput) bool {
	return s.TokenLower && s.Owner == i.Owner && i.Token >= s.Token
}

// unknownEffect is the state after an indeterminate operation that did
// take effect.
func unknownEffect(s modelState, i opInput) (modelState, bool) {
	switch i.Kind {
	case opAcquire, opWait, opUnheard:
		if !mayBeExpired(s, never) {
			return s, false
		}
		return modelState{Token: s.Token + 1, TokenLower: true, Owner: i.Owner, RequestID: i.RequestID, Held: true, Lo: i.Call, Hi: never, TTL: i.TTL}, true
	case opRenew:
		if s.Held && s.Owner == i.Owner && s.Token == i.Token {
			n := s
			n.Hi, n.TTL = never, i.TTL
			return n, true
		}
	case opRelease:
		if s.Owner == i.Owner && s.Token == i.Token {
			n := s
			n.Held = false
			return n, true
		}
	}
	return s, false
}

// LeaseModel is the porcupine model of one lease name.
func LeaseModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{modelState{}} },
		Step: stepModel,
		Equal: func(a, b interface{}) bool {
			return a.(modelState) == b.(modelState)
		},
		DescribeOperation: func(in, out interface{}) string {
			i, o := in.(opInput), out.(opOutput)
			if i.Kind == opLose {
				return "engine restarted: lease and fence may be lost"
			}
			res := "ok"
			switch {
			case o.Unknown:
				res = "unknown"
			case !o.OK && i.Kind == opWait:
				res = "context ended"
			case i.Kind == opRaced && i.Again:
				res = "maybe granted again by the give-up, freed by the return"
			case i.Kind == opRaced || i.Kind == opUndone:
				res = "maybe granted, freed by the return"
			case i.Kind == opHanded:
				res = "maybe granted, expired uncollected"
			case !o.OK && i.Kind == opAcquire && o.Token == 0 && o.HolderOwner != "":
				res = fmt.Sprintf("queued ahead: %s (waiting then: %v)", o.HolderOwner, o.Queued)
			case !o.OK && i.Kind == opAcquire:
				res = fmt.Sprintf("held by %s/%d", o.HolderOwner, o.Token)
			case !o.OK:
				res = "not held"
			case i.Kind == opAcquire || i.Kind == opWait:
				res = fmt.Sprintf("token %d", o.Token)
			}
			return fmt.Sprintf("%s %s tok=%d ttl=%s -> %s", i.Owner, i.Kind, i.Token, time.Duration(i.TTL), res)
		},
		DescribeState: func(st interface{}) string {
			s := st.(modelState)
			owner := s.Owner
			if owner == lostOwner {
				owner = "(lost in a restart)"
			}
			return fmt.Sprintf("token=%d owner=%s held=%v", s.Token, owner, s.Held)
		},
	}
	return nm.ToModel()
}

// partitionBy is a porcupine Partition that checks the operations on each
// key (a permit, a record) apart from the others', in key order.
func partitionBy(key func(porcupine.Operation) string) func([]porcupine.Operation) [][]porcupine.Operation {
	return func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := key(op)
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	}
}

// markQueued sets Queued on every acquire refused with token 0 (naming the
// head of a queue) during which a wait by the owner it names was in
// progress — or had ended by its context up to WaitCleanup before (its
// raced operation's span): a lease server learns that a remote waiter
// left only when its connection closes, and keeps it queued until then.
func markQueued(ops []porcupine.Operation) {
	for k, op := range ops {
		i, o := op.Input.(opInput), op.Output.(opOutput)
		if i.Kind != opAcquire || o.OK || o.Unknown || o.Token != 0 || o.HolderOwner == "" {
			continue
		}
		for _, w := range ops {
			wi := w.Input.(opInput)
			if (wi.Kind == opWait || wi.Kind == opRaced) && wi.Owner == o.HolderOwner && w.Call <= op.Return && w.Return >= op.Call {
				o.Queued = true
				break
			}
		}
		ops[k].Output = o
	}
}

// prepareLeaseOps readies a recorded history for the checker: it marks
// the refusals naming a queue head (markQueued) and drops the raced
// operations that nothing in the history can have seen. A raced grant is
// seen in two ways. Its owner X shows holding it: an answer names X with
// a token X was never granted (a refusal naming X, X's own renew or
// release of it). Or it supersedes the grant before it: an owner's release
// of a token it was granted, refused, says that a later grant was made (a
// release of the latest grant succeeds even after its expiry), and that
// grant may be a raced one made after its waiter returned (a lease server
// frees it a moment later, when it learns the waiter left) if the raced
// operation overlaps the time from that grant to the refusal. A raced
// operation seen neither way is dropped: its "nothing happened" outcome
// explains the history as well, and dropping it spares the checker an
// operation that overlaps all the rest.
func prepareLeaseOps(ops []porcupine.Operation) []porcupine.Operation {
	markQueued(ops)
	granted := map[string]map[uint64]bool{} // owner -> tokens granted to it
	grantCall := map[grantKey]int64{}       // the earliest call that returned the grant
	for _, op := range ops {
		i, o := op.Input.(opInput), op.Output.(opOutput)
		if (i.Kind == opAcquire || i.Kind == opWait) && o.OK {
			if granted[i.Owner] == nil {
				granted[i.Owner] = map[uint64]bool{}
			}
			k := grantKey{i.Owner, o.Token}
			if c, ok := grantCall[k]; !ok || op.Call < c {
				grantCall[k] = op.Call
			}
			granted[i.Owner][o.Token] = true
		}
	}
	// Per owner, the tokens it was seen holding that it was never granted.
	unexplained := map[string]map[uint64]bool{}
	note := func(owner string, token uint64) {
		if unexplained[owner] == nil {
			unexplained[owner] = map[uint64]bool{}
		}
		unexplained[owner][token] = true
	}
	type window struct{ from, to int64 }
	var superseded []window // from a grant to its grantee's refused release of it
	for _, op := range ops {
		i, o := op.Input.(opInput), op.Output.(opOutput)
		switch {
		case i.Kind == opAcquire && !o.OK && o.Token != 0 && !granted[o.HolderOwner][o.Token]:
			note(o.HolderOwner, o.Token)
		case (i.Kind == opRenew || i.Kind == opRelease) && (o.OK || o.Unknown) && !granted[i.Owner][i.Token]:
			note(i.Owner, i.Token)
		case i.Kind == opRelease && !o.OK && !o.Unknown && granted[i.Owner][i.Token]:
			superseded = append(superseded, window{grantCall[grantKey{i.Owner, i.Token}], op.Return})
		}
	}
	// A raced operation is seen when its owner holds an unexplained token
	// or it overlaps a superseded grant; the second one beside a wait (the
	// give-up's grant, racedOps) only when two are needed: two unexplained
	// tokens, or one and a superseded grant. Kept when not needed, it only
	// slows the checker, which matters: each overlaps every operation.
	seen := func(op porcupine.Operation) bool {
		i := op.Input.(opInput)
		need := 1
		if i.Again {
			need = 2
		}
		n := len(unexplained[i.Owner])
		for _, w := range superseded {
			if op.Call < w.to && op.Return > w.from {
				n++
				break
			}
		}
		return n >= need
	}
	out := ops[:0]
	var handed []porcupine.Operation
	for _, op := range ops {
		i, o := op.Input.(opInput), op.Output.(opOutput)
		if i.Kind == opRaced && !seen(op) {
			continue
		}
		if i.Kind == opWait && o.OK && !o.Unknown && below(unexplained[i.Owner], o.Token) {
			handed = append(handed, handedOp(op))
		}
		out = append(out, op)
	}
	return append(out, handed...)
}

// below reports whether tokens holds one below t.
func below(tokens map[uint64]bool, t uint64) bool {
	for k := range tokens {
		if k < t {
			return true
		}
	}
	return false
}

// handedOp is the opHanded beside wait, a granted wait: over the wait's
// interval.
func handedOp(wait porcupine.Operation) porcupine.Operation {
	in := wait.Input.(opInput)
	in.Kind = opHanded
	return porcupine.Operation{ClientId: wait.ClientId, Input: in, Call: wait.Call, Output: opOutput{Return: wait.Return}, Return: wait.Return}
}

// grantKey names a grant: its owner and token.
type grantKey struct {
	owner string
	token uint64
}

// racedOp is the opRaced beside wait, a wait ended by its context: from its
// call to freedBy.
func racedOp(wait porcupine.Operation, freedBy int64) porcupine.Operation {
	in := wait.Input.(opInput)
	in.Kind = opRaced
	return porcupine.Operation{ClientId: wait.ClientId, Input: in, Call: wait.Call, Output: opOutput{Return: freedBy}, Return: freedBy}
}

// racedOps are the operations the recorder adds beside a wait ended by
// its context: the grant that may have raced with the end (racedOp), and
// a second one, from the same call to the same bound. The give-up looks
// for the raced grant by the wait's request id (a read, then an acquire
// with that id, which returns the grant if it is still the one held and
// is then released): if the raced grant expired or was freed between the
// read and the acquire, that acquire finds the lease free and grants it
// anew, for the time of one more release. Nobody is told of either grant;
// both are freed by the bound.
func racedOps(wait porcupine.Operation, freedBy int64) []porcupine.Operation {
	again := racedOp(wait, freedBy)
	in := again.Input.(opInput)
	in.Again = true
	again.Input = in
	return []porcupine.Operation{racedOp(wait, freedBy), again}
}
