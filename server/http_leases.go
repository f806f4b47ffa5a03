package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
)

// Leases and elections: the handlers of the /v1/leases and
// /v1/elections routes, and the JSON shapes of a lease.

type httpAcquireBody struct {
	Owner      string  `json:"owner"`
	TTLMS      int64   `json:"ttl_ms"`
	Data       *string `json:"data"`
	DataBase64 *string `json:"data_base64"`
	RequestID  string  `json:"request_id"`
	WaitMS     int64   `json:"wait_ms"`
	Session    string  `json:"session"`
}

// request converts the body to a backend request for name.
func (a *httpAcquireBody) request(name string) (AcquireRequest, error) {
	var data []byte
	switch {
	case a.Data != nil && a.DataBase64 != nil:
		return AcquireRequest{}, &leasehold.InvalidError{Field: "data", Reason: "give data or data_base64, not both"}
	case a.Data != nil:
		data = []byte(*a.Data)
	case a.DataBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*a.DataBase64)
		if err != nil {
			return AcquireRequest{}, &leasehold.InvalidError{Field: "data_base64", Reason: "not valid standard base64: " + err.Error()}
		}
		data = b
	}
	wait, err := httpWait(a.WaitMS)
	if err != nil {
		return AcquireRequest{}, err
	}
	return AcquireRequest{
		AcquireRequest: leasehold.AcquireRequest{
			Name: name, Owner: a.Owner, RequestID: a.RequestID, TTL: httpMS(a.TTLMS), Data: data,
		},
		Session: a.Session,
		Wait:    wait,
	}, nil
}

func httpWait(ms int64) (time.Duration, error) {
	if ms < 0 || ms > MaxWait.Milliseconds() {
		return 0, &leasehold.InvalidError{Field: "wait_ms", Reason: fmt.Sprintf("%d must be in [0, %d] (wait longer by repeating the request)", ms, MaxWait.Milliseconds())}
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// httpMS converts milliseconds, saturating so that an absurd value is
// refused by validation instead of overflowing into a valid one.
func httpMS(ms int64) time.Duration {
	const lim = int64(1<<63-1) / int64(time.Millisecond)
	switch {
	case ms > lim:
		return time.Duration(1<<63 - 1)
	case ms < -lim:
		return time.Duration(-1 << 63)
	}
	return time.Duration(ms) * time.Millisecond
}

func (h *httpAPI) acquire(q *httpReq, name string) {
	var body httpAcquireBody
	if !h.decode(q, &body) {
		return
	}
	req, err := body.request(name)
	if err != nil {
		h.fail(q, err)
		return
	}
	ctx := q.r.Context()
	if req.Wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = h.drainable(ctx)
		defer cancel()
	}
	if !h.ownsSession(q, req.Session) {
		return
	}
	rec, err := h.b.Acquire(ctx, req)
	if err != nil {
		h.fail(q, err)
		return
	}
	lj := httpLease(rec)
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

type httpRenewBody struct {
	Owner  string `json:"owner"`
	Token  uint64 `json:"token"`
	TTLMS  int64  `json:"ttl_ms"`
	Secret string `json:"secret"`
}

type httpRenewJSON struct {
	Name  string `json:"name"`
	Token uint64 `json:"token"`
	TTLMS int64  `json:"ttl_ms"`
}

func (h *httpAPI) renew(q *httpReq, name string) {
	var body httpRenewBody
	if !h.decode(q, &body) {
		return
	}
	if !h.checkProof(q, name, body.Owner, body.Token, body.Secret) {
		return
	}
	ttl := httpMS(body.TTLMS)
	if err := h.b.Renew(q.r.Context(), name, body.Owner, body.Token, ttl); err != nil {
		if errors.Is(err, leasehold.ErrNotHeld) && h.metrics != nil {
			h.metrics.lost.Inc()
		}
		h.fail(q, err)
		return
	}
	h.json(q, http.StatusOK, httpRenewJSON{Name: name, Token: body.Token, TTLMS: body.TTLMS})
}

type httpReleaseBody struct {
	Owner  string `json:"owner"`
	Token  uint64 `json:"token"`
	Secret string `json:"secret"`
}

func (h *httpAPI) release(q *httpReq, name string) {
	var body httpReleaseBody
	if !h.decode(q, &body) {
		return
	}
	if !h.checkProof(q, name, body.Owner, body.Token, body.Secret) {
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
	h.json(q, http.StatusOK, httpLease(rec))
}

func (h *httpAPI) get(q *httpReq, name string) {
	rec, err := h.b.Get(q.r.Context(), name)
	if err != nil {
		h.fail(q, err)
		return
	}
	lj := httpLease(rec)
	ws := httpWaiters(h.b.Waiters(name))
	lj.Waiters = &ws
	h.json(q, http.StatusOK, lj)
}

type httpListJSON struct {
	Leases []httpLeaseJSON `json:"leases"`
	// Next, when more leases remain, is the last name of this page: ask
	// again with ?after=Next.
	Next string `json:"next,omitempty"`
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
	after := v.Get("after")
	if after != "" {
		if err := httpCheckName(after); err != nil {
			var inv *leasehold.InvalidError
			if errors.As(err, &inv) {
				err = &leasehold.InvalidError{Field: "after", Reason: inv.Reason}
			}
			h.fail(q, err)
			return
		}
	}
	recs, err := h.b.List(q.r.Context(), a.prefix)
	if err != nil {
		h.fail(q, err)
		return
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Name < recs[j].Name })
	out := httpListJSON{Leases: make([]httpLeaseJSON, 0, min(len(recs), limit))}
	for _, r := range recs {
		if (after != "" && r.Name <= after) || !q.id.Allowed(r.Name, AccessRead) {
			continue
		}
		if len(out.Leases) == limit {
			out.Next = out.Leases[limit-1].Name
			break
		}
		out.Leases = append(out.Leases, httpLease(r))
	}
	h.json(q, http.StatusOK, out)
}

// JSON shapes.

type httpLeaseJSON struct {
	Name        string `json:"name"`
	Owner       string `json:"owner"`
	Token       uint64 `json:"token"`
	TTLMS       int64  `json:"ttl_ms"`
	RemainingMS int64  `json:"remaining_ms"`
	Acquired    string `json:"acquired"`
	// Data is the lease's data when it is valid UTF-8; otherwise it is in
	// DataBase64. Neither is set when the lease has no data.
	Data       *string `json:"data,omitempty"`
	DataBase64 string  `json:"data_base64,omitempty"`
	Session    string  `json:"session,omitempty"`
	Permit     *int    `json:"permit,omitempty"`
	Term       uint64  `json:"term,omitempty"`
	// Secret is the grant's holder proof: acquire responses only.
	Secret  string            `json:"secret,omitempty"`
	Waiters *[]httpWaiterJSON `json:"waiters,omitempty"` // GET only: always a list there
}

type httpWaiterJSON struct {
	Owner    string `json:"owner"`
	Session  string `json:"session,omitempty"`
	Since    string `json:"since"`
	WaitedMS int64  `json:"waited_ms"`
}

type httpHolderJSON struct {
	Owner       string `json:"owner"`
	Token       uint64 `json:"token"`
	RemainingMS int64  `json:"remaining_ms"`
	Acquired    string `json:"acquired,omitempty"`
}

func httpTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func httpLease(r leasehold.Record) httpLeaseJSON {
	lj := httpLeaseJSON{
		Name: r.Name, Owner: r.Owner, Token: r.Token,
		TTLMS:       httpCeilMS(r.TTL),
		RemainingMS: max(0, r.Remaining.Milliseconds()),
		Acquired:    httpTime(r.Acquired),
	}
	if len(r.Data) > 0 {
		if utf8.Valid(r.Data) {
			s := string(r.Data)
			lj.Data = &s
		} else {
			lj.DataBase64 = base64.StdEncoding.EncodeToString(r.Data)
		}
	}
	return lj
}

// httpCeilMS rounds a duration up to whole milliseconds (a TTL is never
// reported shorter than it is).
func httpCeilMS(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	return int64(ms)
}

func httpWaiters(ws []Waiter) []httpWaiterJSON {
	out := make([]httpWaiterJSON, 0, len(ws))
	for _, w := range ws {
		out = append(out, httpWaiterJSON{Owner: w.Owner, Session: w.Session, Since: httpTime(w.Since), WaitedMS: w.Waited.Milliseconds()})
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
			h.problem(q, http.StatusNotFound, "not-found", "No leader", fmt.Sprintf("election %q has no leader", name), nil)
			return
		}
		h.fail(q, err)
		return
	}
	lj := httpLease(rec)
	lj.Term = rec.Token
	h.json(q, http.StatusOK, lj)
}
