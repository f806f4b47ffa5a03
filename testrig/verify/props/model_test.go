package props

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

// The reference model: what a correct store answers, per lease name, on a
// clock that only the test moves. It follows the contract of
// leasehold.Store (store.go) and, where a store documents more, the store's
// own documentation:
//
//   - a grant is made when the lease is free or expired (expired: the
//     clock has reached its expiry; the boundary instant is expired) and
//     its token is strictly greater than every earlier token of that name
//     (of every name, on the engine, which documents one counter);
//   - a retried acquire (same owner, same non-empty request id, while the
//     grant is live) gets the same token back with a fresh expiry;
//   - someone else's acquire of a live lease gets a *HeldError naming the
//     holder, its token and the exact time left, and changes nothing;
//   - a renewal needs the live grant's owner and token;
//   - a release needs the owner and token of the latest grant, and repeats
//     (also after expiry, while nobody took it over) as long as the store
//     remembers that grant;
//   - invalid arguments give an *InvalidError and change nothing;
//   - after a restart, SQLite keeps everything (its expiry runs on the boot
//     clock, which a process restart does not move); the engine recovers
//     every grant it had not freed with its full TTL (the largest TTL the
//     grant was given) from the moment of recovery, and remembers freed
//     ones (a repeated release by their holder still answers ok);
//   - after a reboot (a new boot id), SQLite treats every lease of the old
//     boot as expired.
//
// Times are nanoseconds since the fake clock's start.

// restartKind is what a store documents about a restart.
type restartKind int

const (
	restartNone    restartKind = iota // not durable
	restartKeep                       // state and expiries unchanged (SQLite)
	restartRecover                    // unfreed grants get their full TTL again (engine)
)

// grant is the model's state of one name: its latest grant.
type grant struct {
	owner, reqID string
	token        uint64
	data         []byte
	ttl          time.Duration // Record.TTL
	expires      time.Duration // model clock
	held         bool          // not released (it may have expired)
	known        bool          // the store remembers it: its holder's release repeats

	// For the engine's recovery.
	maxTTL    time.Duration // the largest TTL given to this grant (it logs only raises)
	grantTTL  time.Duration // as logged with the grant
	grantData []byte        // as logged with the grant
	// acted: the engine has certainly freed (and logged) this grant's
	// expiry, because a write touched the name after it expired. Until
	// then its expiry loop may or may not have logged it.
	acted bool
	// After a recovery the engine reports the TTL and data of its log,
	// which are the grant's own (retries and renewals that did not raise
	// the TTL are not logged); the model accepts either those or the
	// latest, since the store documents neither.
	altTTL  *time.Duration
	altData *[]byte
}

func (g *grant) live(now time.Duration) bool {
	return g != nil && g.known && g.held && now < g.expires
}

type model struct {
	now          time.Duration
	leases       map[string]*grant
	maxToken     map[string]uint64 // every token ever granted per name
	global       uint64            // every token ever granted
	globalTokens bool              // tokens also exceed every other name's (engine)
	seen         map[string]int    // how often each rule was exercised
}

func newModel(globalTokens bool) *model {
	return &model{leases: map[string]*grant{}, maxToken: map[string]uint64{}, globalTokens: globalTokens, seen: map[string]int{}}
}

// answer is an error's kind, for comparison with what the model expects.
type answer string

const (
	ansOK       answer = "ok"
	ansInvalid  answer = "invalid"
	ansHeld     answer = "held"
	ansNotHeld  answer = "not held"
	ansNotFound answer = "not found"
)

// classify names err's kind; an unexpected error is returned as itself.
func classify(err error) answer {
	var inv *leasehold.InvalidError
	var held *leasehold.HeldError
	switch {
	case err == nil:
		return ansOK
	case errors.As(err, &inv) && errors.Is(err, leasehold.ErrInvalid):
		return ansInvalid
	case errors.As(err, &held) && errors.Is(err, leasehold.ErrHeld):
		return ansHeld
	case errors.Is(err, leasehold.ErrNotHeld):
		return ansNotHeld
	case errors.Is(err, leasehold.ErrNotFound):
		return ansNotFound
	}
	return answer("unexpected error: " + err.Error())
}

// checkAcquire compares a valid TryAcquire's answer with the model and
// applies it. It returns a description of the mismatch, or "".
func (m *model) checkAcquire(req leasehold.AcquireRequest, rec leasehold.Record, err error) string {
	g := m.leases[req.Name]
	got := classify(err)
	if g.live(m.now) {
		if req.RequestID != "" && g.reqID == req.RequestID && g.owner == req.Owner {
			// A retry: the same grant, refreshed.
			if got != ansOK {
				return fmt.Sprintf("retried acquire answered %s, want the holder's grant (token %d) back", got, g.token)
			}
			if msg := sameRecord(rec, req.Name, req.Owner, g.token, req.TTL, nil, req.TTL, req.Data, nil); msg != "" {
				return "retried acquire: " + msg
			}
			g.expires = m.now + req.TTL
			g.ttl, g.data = req.TTL, req.Data
			g.maxTTL = max(g.maxTTL, req.TTL)
			g.altTTL, g.altData = nil, nil
			m.seen["retried acquire"]++
			return ""
		}
		if got != ansHeld {
			return fmt.Sprintf("acquire of a lease held by %s (token %d, %s left) answered %s", g.owner, g.token, g.expires-m.now, got)
		}
		var he *leasehold.HeldError
		errors.As(err, &he)
		if he.Owner != g.owner || he.Token != g.token || he.Remaining != g.expires-m.now {
			return fmt.Sprintf("held error names %s token %d with %s left, want %s token %d with %s left",
				he.Owner, he.Token, he.Remaining, g.owner, g.token, g.expires-m.now)
		}
		m.seen["held"]++
		return ""
	}
	if got != ansOK {
		return fmt.Sprintf("acquire of a free or expired lease answered %s", got)
	}
	floor := m.maxToken[req.Name]
	if m.globalTokens {
		floor = m.global
	}
	if rec.Token <= floor {
		return fmt.Sprintf("new grant has token %d, want more than %d (every earlier token)", rec.Token, floor)
	}
	if msg := sameRecord(rec, req.Name, req.Owner, rec.Token, req.TTL, nil, req.TTL, req.Data, nil); msg != "" {
		return "new grant: " + msg
	}
	m.maxToken[req.Name] = rec.Token
	m.global = max(m.global, rec.Token)
	m.leases[req.Name] = &grant{
		owner: req.Owner, reqID: req.RequestID, token: rec.Token, data: req.Data, ttl: req.TTL,
		expires: m.now + req.TTL, held: true, known: true,
		maxTTL: req.TTL, grantTTL: req.TTL, grantData: req.Data,
	}
	m.seen["grant"]++
	return ""
}

// touch notes that a write looked at name (the engine frees an expired
// grant then).
func (m *model) touch(name string) {
	if g := m.leases[name]; g != nil && g.held && g.known && g.expires <= m.now {
		g.acted = true
	}
}

func (m *model) checkRenew(name, owner string, token uint64, ttl time.Duration, err error) string {
	g := m.leases[name]
	got := classify(err)
	if g.live(m.now) && g.owner == owner && g.token == token {
		if got != ansOK {
			return fmt.Sprintf("holder's renewal answered %s", got)
		}
		g.expires = m.now + ttl
		g.ttl = ttl
		g.maxTTL = max(g.maxTTL, ttl)
		g.altTTL = nil
		m.seen["renewal"]++
		return ""
	}
	m.touch(name)
	if got != ansNotHeld {
		return fmt.Sprintf("renewal by %s token %d of a lease it does not hold answered %s", owner, token, got)
	}
	m.seen["renewal refused"]++
	return ""
}

func (m *model) checkRelease(name, owner string, token uint64, err error) string {
	g := m.leases[name]
	got := classify(err)
	m.touch(name)
	if g != nil && g.known && g.owner == owner && g.token == token {
		if got != ansOK {
			return fmt.Sprintf("release by the latest grant's holder answered %s", got)
		}
		if g.live(m.now) {
			m.seen["release"]++
		} else {
			m.seen["release repeated or after expiry"]++
		}
		g.held = false
		return ""
	}
	if got != ansNotHeld {
		return fmt.Sprintf("release by %s token %d, not the latest grant, answered %s", owner, token, got)
	}
	m.seen["release refused"]++
	return ""
}

func (m *model) checkGet(name string, rec leasehold.Record, err error) string {
	g := m.leases[name]
	got := classify(err)
	if !g.live(m.now) {
		if got != ansNotFound {
			return fmt.Sprintf("get of a free lease answered %s (%+v)", got, rec)
		}
		return ""
	}
	if got != ansOK {
		return fmt.Sprintf("get of a lease held by %s token %d answered %s", g.owner, g.token, got)
	}
	if msg := g.same(rec, name, m.now); msg != "" {
		return "get: " + msg
	}
	return ""
}

func (m *model) live(prefix string) []string {
	var names []string
	for name, g := range m.leases {
		if strings.HasPrefix(name, prefix) && g.live(m.now) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

func (m *model) checkList(prefix string, recs []leasehold.Record, err error) string {
	if got := classify(err); got != ansOK {
		return fmt.Sprintf("list %q answered %s", prefix, got)
	}
	want := m.live(prefix)
	var have []string
	for _, r := range recs {
		have = append(have, r.Name)
	}
	if strings.Join(have, "\x00") != strings.Join(want, "\x00") {
		return fmt.Sprintf("list %q = %q, want %q", prefix, have, want)
	}
	for i, r := range recs {
		if msg := m.leases[want[i]].same(r, want[i], m.now); msg != "" {
			return fmt.Sprintf("list %q: %s", prefix, msg)
		}
	}
	return ""
}

// same compares a record read from the store with the live grant g.
func (g *grant) same(rec leasehold.Record, name string, now time.Duration) string {
	return sameRecord(rec, name, g.owner, g.token, g.ttl, g.altTTL, g.expires-now, g.data, g.altData)
}

func sameRecord(rec leasehold.Record, name, owner string, token uint64, ttl time.Duration, altTTL *time.Duration,
	remaining time.Duration, data []byte, altData *[]byte) string {
	ttlOK := rec.TTL == ttl || altTTL != nil && rec.TTL == *altTTL
	dataOK := bytes.Equal(rec.Data, data) || altData != nil && bytes.Equal(rec.Data, *altData)
	if rec.Name != name || rec.Owner != owner || rec.Token != token || !ttlOK || rec.Remaining != remaining || !dataOK {
		return fmt.Sprintf("record {%s %s token %d ttl %s remaining %s data %q}, want {%s %s token %d ttl %s remaining %s data %q}",
			rec.Name, rec.Owner, rec.Token, rec.TTL, rec.Remaining, rec.Data, name, owner, token, ttl, remaining, data)
	}
	return ""
}

// restart applies a restart of the store. For the engine it returns the
// names whose fate is not determined (an expired grant whose expiry the
// engine may or may not have logged): the caller reads them and settles
// each with settle.
func (m *model) restart(kind restartKind) (undetermined []string) {
	if kind != restartRecover {
		return nil
	}
	for name, g := range m.leases {
		switch {
		case !g.known:
			g.held = false
		case !g.held || g.acted:
			m.seen["freed grant remembered after restart"]++
			g.held = false
		case g.expires > m.now:
			m.seen["live grant recovered by restart"]++
			m.recover(g)
		default:
			undetermined = append(undetermined, name)
		}
	}
	sort.Strings(undetermined)
	return undetermined
}

func (m *model) recover(g *grant) {
	g.expires = m.now + g.maxTTL
	g.acted = false
	if g.ttl != g.grantTTL {
		t := g.grantTTL
		g.altTTL = &t
	}
	if !bytes.Equal(g.data, g.grantData) {
		d := g.grantData
		g.altData = &d
	}
}

// settle decides an undetermined grant from what the restarted engine
// answered for it: either recovered with its full TTL, or forgotten.
func (m *model) settle(name string, rec leasehold.Record, err error) string {
	g := m.leases[name]
	switch classify(err) {
	case ansNotFound:
		g.held = false // freed, and remembered for a repeated release
		m.seen["expired grant freed by restart"]++
		return ""
	case ansOK:
		m.seen["expired grant recovered by restart"]++
		m.recover(g)
		if msg := g.same(rec, name, m.now); msg != "" {
			return "expired grant recovered after restart: " + msg
		}
		return ""
	default:
		return fmt.Sprintf("get after restart answered %v", err)
	}
}

// reboot applies a reboot (SQLite: a new boot id): every lease of the old
// boot has expired; the grants are still known.
func (m *model) reboot() {
	for _, g := range m.leases {
		g.expires = math.MinInt64
	}
}

// nextExpiry returns the expiries of the live leases, for clock jumps that
// land on a boundary.
func (m *model) expiries() []time.Duration {
	var out []time.Duration
	for _, name := range m.live("") {
		out = append(out, m.leases[name].expires)
	}
	return out
}
