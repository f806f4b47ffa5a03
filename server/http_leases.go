package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/wire/httpwire"
)

// Leases and elections: the handlers of the /v1/leases and
// /v1/elections routes (their JSON shapes are in wire/httpwire).

// acquireRequest converts an acquire's body (of a lease or a semaphore)
// to a backend request for name and checks that its session is the
// caller's. It returns the context to acquire in: with a wait, one that
// ends when the server drains (call cancel).
func (h *httpAPI) acquireRequest(q *httpReq, a *httpwire.AcquireBody, name string) (AcquireRequest, context.Context, context.CancelFunc, bool) {
	data, err := a.Bytes()
	var wait time.Duration
	if err == nil {
		wait, err = httpWait(a.WaitMS)
	}
	if err != nil {
		h.fail(q, err)
		return AcquireRequest{}, nil, nil, false
	}
	req := AcquireRequest{
		AcquireRequest: leasehold.AcquireRequest{
			Name: name, Owner: a.Owner, RequestID: a.RequestID, TTL: httpwire.MS(a.TTLMS), Data: data,
		},
		Session: a.Session,
		Wait:    wait,
		GiveUp:  bool(a.GiveUp),
	}
	if err := validateGiveUp(req); err != nil {
		h.fail(q, err)
		return AcquireRequest{}, nil, nil, false
	}
	if err := checkAcquire(q.id, &req); err != nil {
		h.fail(q, err)
		return AcquireRequest{}, nil, nil, false
	}
	if !h.ownsSession(q, req.Session) {
		return AcquireRequest{}, nil, nil, false
	}
	ctx, cancel := q.r.Context(), context.CancelFunc(func() {})
	if wait > 0 {
		ctx, cancel = h.drainable(ctx)
	}
	return req, ctx, cancel, true
}

func httpWait(ms int64) (time.Duration, error) {
	if ms < 0 || ms > MaxWait.Milliseconds() {
		return 0, &leasehold.InvalidError{Field: "wait_ms", Reason: fmt.Sprintf("%d must be in [0, %d] (wait longer by repeating the request)", ms, MaxWait.Milliseconds())}
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func (h *httpAPI) acquire(q *httpReq, name string) {
	var body httpwire.AcquireBody
	if !h.decode(q, &body) || !h.workflowWrite(q, name) {
		return
	}
	req, ctx, cancel, ok := h.acquireRequest(q, &body, name)
	if !ok {
		return
	}
	defer cancel()
	rec, err := h.b.Acquire(ctx, req)
	if err != nil {
		h.fail(q, err)
		return
	}
	lj := httpwire.LeaseOf(rec)
	lj.Session = req.Session
	lj.Secret = h.secret(rec)
	h.json(q, http.StatusOK, lj)
}

// secret is the holder proof of a grant, for the acquirer only ("" with
// proofs off).
func (h *httpAPI) secret(rec leasehold.Record) string {
	if h.holders == nil {
		return ""
	}
	return h.holders.Secret(rec.Name, rec.Owner, rec.Token)
}

// checkProof answers 403 bad-proof unless secret proves holding the grant
// (name, owner, token).
func (h *httpAPI) checkProof(q *httpReq, name, owner string, token uint64, secret string) bool {
	if err := h.holders.Check(name, owner, token, secret); err != nil {
		h.fail(q, err)
		return false
	}
	return true
}

func (h *httpAPI) renew(q *httpReq, name string) {
	var body httpwire.RenewBody
	if !h.decode(q, &body) || !h.checkProof(q, name, body.Owner, body.Token, body.Secret) || !h.workflowWrite(q, name) {
		return
	}
	ttl := httpwire.MS(body.TTLMS)
	if err := h.b.Renew(q.r.Context(), name, body.Owner, body.Token, ttl); err != nil {
		if errors.Is(err, leasehold.ErrNotHeld) && h.metrics != nil {
			h.metrics.lost.Inc()
		}
		h.fail(q, err)
		return
	}
	h.json(q, http.StatusOK, httpwire.Renewed{Name: name, Token: body.Token, TTLMS: body.TTLMS})
}

func (h *httpAPI) release(q *httpReq, name string) {
	var body httpwire.ReleaseBody
	if !h.decode(q, &body) || !h.checkProof(q, name, body.Owner, body.Token, body.Secret) || !h.workflowWrite(q, name) {
		return
	}
	if err := h.b.Release(q.r.Context(), name, body.Owner, body.Token); err != nil {
		h.fail(q, err)
		return
	}
	q.w.WriteHeader(http.StatusNoContent)
}

func (h *httpAPI) forceRelease(q *httpReq, name string) {
	var body struct{}
	if !h.decode(q, &body) {
		return
	}
	rec, err := h.b.ForceRelease(q.r.Context(), name)
	if err != nil {
		h.fail(q, err)
		return
	}
	h.json(q, http.StatusOK, httpwire.LeaseOf(rec))
}

func (h *httpAPI) get(q *httpReq, name string) {
	rec, err := h.b.Get(q.r.Context(), name)
	if err != nil {
		h.fail(q, err)
		return
	}
	lj := httpwire.LeaseOf(rec)
	ws := httpWaiters(h.b.Waiters(name))
	lj.Waiters = &ws
	h.json(q, http.StatusOK, lj)
}

// HTTPMaxListLimit is the default and the largest ?limit= of GET
// /v1/leases: the most leases one page has.
const HTTPMaxListLimit = 10000

// list serves GET /v1/leases?prefix=P&after=A&limit=N: the leases under P
// the caller may read, sorted by name, with names after A, at most N.
func (h *httpAPI) list(q *httpReq, a *httpArgs) {
	v := q.r.URL.Query()
	limit := HTTPMaxListLimit
	if s := v.Get("limit"); s != "" || v.Has("limit") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > HTTPMaxListLimit {
			h.fail(q, &leasehold.InvalidError{Field: "limit", Reason: fmt.Sprintf("%q must be an integer in [1, %d]", s, HTTPMaxListLimit)})
			return
		}
		limit = n
	}
	// after is only compared, never used as a name (as LH.SCAN's
	// cursor): "next" may be a name stored before today's rules, and a
	// made-up one can only skip names.
	after := v.Get("after")
	// The page's leases and one more (to know more remain): the engine
	// collects no more than that (PageLister), whatever the prefix holds.
	recs, err := listPageBounded(q.r.Context(), h.b, a.prefix, after, limit+1,
		func(name string) bool { return q.id.Allowed(name, AccessRead) })
	if err != nil {
		h.fail(q, err)
		return
	}
	out := httpwire.List{Leases: make([]httpwire.Lease, 0, min(len(recs), limit))}
	size := 0
	for _, r := range recs {
		// A page ends at limit leases, or once its leases come to more
		// than listPageBytes (the rest on the next page).
		if n := len(out.Leases); n == limit || n > 0 && size+recordBytes(&r) > listPageBytes {
			out.Next = out.Leases[n-1].Name
			break
		}
		size += recordBytes(&r)
		out.Leases = append(out.Leases, httpwire.LeaseOf(r))
	}
	h.json(q, http.StatusOK, out)
}

func httpWaiters(ws []Waiter) []httpwire.Waiter {
	out := make([]httpwire.Waiter, 0, len(ws))
	for _, w := range ws {
		out = append(out, httpwire.Waiter{Owner: w.Owner, Session: w.Session, Since: httpwire.Time(w.Since), WaitedMS: w.Waited.Milliseconds()})
	}
	return out
}

// election serves GET /v1/elections/{name}/leader: the lease of the
// election's name (its token is the term). Campaigning is an acquire of
// the name with wait_ms.
func (h *httpAPI) election(q *httpReq, name string) {
	rec, err := h.b.Get(q.r.Context(), name)
	if err != nil {
		if errors.Is(err, leasehold.ErrNotFound) {
			h.problem(q, http.StatusNotFound, httpwire.NotFound, "No leader", fmt.Sprintf("election %q has no leader", name), nil)
			return
		}
		h.fail(q, err)
		return
	}
	lj := httpwire.LeaseOf(rec)
	lj.Term = rec.Token
	h.json(q, http.StatusOK, lj)
}
