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
// were. A grant still needs the lost holder's lease to have expired by its
// own call times (what Redis's hold-back promises) and a token above every
// earlier one (its token floor).

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
)

func (k opKind) String() string {
	return [...]string{"acquire", "renew", "release", "lose"}[k]
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
}

// opOutput is what it got back.
type opOutput struct {
	OK          bool   // granted / renewed / released
	Token       uint64 // acquire: granted token, or the holder's token when held
	HolderOwner string // acquire when held
	Unknown     bool   // indeterminate: no definite answer
	Return      int64
}

type modelState struct {
	Token      uint64 // latest grant (a lower bound if TokenLower)
	TokenLower bool
	Owner      string
	RequestID  string
	Held       bool
	Lo, Hi     int64
	TTL        int64
}

func mayBeExpired(s modelState, t int64) bool {
	return !s.Held || t >= s.Lo+int64(float64(s.TTL)*(1-Rho))-int64(Slack)
}

func mayBeAlive(s modelState, t int64) bool {
	return s.Held && t < s.Hi+int64(float64(s.TTL)*(1+Rho))+int64(Slack)
}

func tokenAbove(s modelState, t uint64) bool { return t > s.Token }

func stepModel(st, in, out interface{}) []interface{} {
	s, i, o := st.(modelState), in.(opInput), out.(opOutput)
	if i.Kind == opLose {
		lost := s
		lost.Owner, lost.RequestID = lostOwner, ""
		return []interface{}{s, lost}
	}
	if o.Unknown {
		res := []interface{}{s}
		if next, ok := unknownEffect(s, i); ok {
			res = append(res, next)
			if i.Kind == opAcquire {
				// A store may undo a grant it could not confirm before
				// answering with an error (Redis does when a reconnect
				// happened during the acquire): granted, then freed.
				undone := next
				undone.Held = false
				res = append(res, undone)
			}
		}
		return res
	}
	switch i.Kind {
	case opAcquire:
		if o.OK {
			retry := s.Held && s.Owner == i.Owner && s.RequestID == i.RequestID && i.RequestID != "" &&
				o.Token == s.Token && !s.TokenLower && mayBeAlive(s, i.Call)
			fresh := tokenAbove(s, o.Token) && mayBeExpired(s, o.Return)
			// The caller's own grant from an indeterminate acquire, undone
			// by the store and granted again with a higher token.
			regrant := s.Held && s.TokenLower && s.Owner == i.Owner && tokenAbove(s, o.Token)
			if !retry && !fresh && !regrant {
				return nil
			}
			return []interface{}{modelState{Token: o.Token, Owner: i.Owner, RequestID: i.RequestID, Held: true, Lo: i.Call, Hi: o.Return, TTL: i.TTL}}
		}
		sameHolder := o.HolderOwner == s.Owner && (o.Token == s.Token || s.TokenLower)
		if !sameHolder || !mayBeAlive(s, i.Call) {
			return nil
		}
		return []interface{}{s}
	case opRenew:
		mine := s.Held && s.Owner == i.Owner && s.Token == i.Token && !s.TokenLower
		if o.OK {
			if !mine || !mayBeAlive(s, i.Call) {
				return nil
			}
			n := s
			n.Lo, n.Hi, n.TTL = i.Call, o.Return, i.TTL
			return []interface{}{n}
		}
		if mine && !mayBeExpired(s, o.Return) {
			return nil
		}
		return []interface{}{s}
	case opRelease:
		latest := s.Owner == i.Owner && s.Token == i.Token && !s.TokenLower
		if o.OK != latest {
			return nil
		}
		if o.OK {
			n := s
			n.Held = false
			return []interface{}{n}
		}
		return []interface{}{s}
	}
	return nil
}

// unknownEffect is the state after an indeterminate operation that did
// take effect.
func unknownEffect(s modelState, i opInput) (modelState, bool) {
	const never = int64(1) << 62
	switch i.Kind {
	case opAcquire:
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
			case !o.OK && i.Kind == opAcquire:
				res = fmt.Sprintf("held by %s/%d", o.HolderOwner, o.Token)
			case !o.OK:
				res = "not held"
			case i.Kind == opAcquire:
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
