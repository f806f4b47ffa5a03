package server

import (
	"net/http"
	"sync"
	"time"

	"github.com/leasehold/leasehold/wire/httpwire"
)

// Sessions: POST /v1/sessions, POST /v1/sessions/{id}/keepalive, DELETE
// /v1/sessions/{id}; with auth on, a session is usable only by the
// identity that opened it here.

func httpSession(s Session) httpwire.Session {
	return httpwire.Session{ID: s.ID, TTLMS: httpwire.CeilMS(s.TTL), RemainingMS: httpwire.LeftMS(s.Remaining), Leases: s.Leases}
}

func (h *httpAPI) openSession(q *httpReq, _ *httpArgs) {
	var body httpwire.SessionBody
	if !h.decode(q, &body) {
		return
	}
	s, err := h.b.OpenSession(q.r.Context(), httpwire.MS(body.TTLMS))
	h.sessionAnswer(q, http.StatusCreated, s, err)
}

// keepAlive serves POST /v1/sessions/{id}/keepalive.
func (h *httpAPI) keepAlive(q *httpReq, a *httpArgs) {
	id := a.params["id"]
	var body struct{}
	if !h.decode(q, &body) || !h.ownsSession(q, id) {
		return
	}
	s, err := h.b.KeepAlive(q.r.Context(), id)
	h.sessionAnswer(q, http.StatusOK, s, err)
}

// sessionAnswer answers an open or a keepalive: the session, which with
// auth on is bound to the caller, or the error.
func (h *httpAPI) sessionAnswer(q *httpReq, status int, s Session, err error) {
	if err != nil {
		h.fail(q, err)
		return
	}
	if h.auth.Enabled() {
		h.sessions.bind(q.id, s)
	}
	h.json(q, status, httpSession(s))
}

// closeSession serves DELETE /v1/sessions/{id}.
func (h *httpAPI) closeSession(q *httpReq, a *httpArgs) {
	id := a.params["id"]
	if !h.ownsSession(q, id) {
		return
	}
	if err := h.b.CloseSession(q.r.Context(), id); err != nil {
		h.fail(q, err)
		return
	}
	h.sessions.unbind(id)
	q.w.WriteHeader(http.StatusNoContent)
}

// ownsSession checks, with auth on, that the session was opened through
// this handler by the caller's identity; otherwise it answers no-session
// (as for an unknown session: ids are not confirmed to others). An empty
// id is no session and passes.
func (h *httpAPI) ownsSession(q *httpReq, sid string) bool {
	if sid == "" || !h.auth.Enabled() || h.sessions.owns(q.id, sid) {
		return true
	}
	h.fail(q, ErrNoSession)
	return false
}

// httpSessions remembers who opened each session, until well after it
// must have expired (twice its TTL and a minute after the last keepalive).
type httpSessions struct {
	mu sync.Mutex
	m  map[string]httpSessionOwner
}

type httpSessionOwner struct {
	identity string
	until    time.Time
}

func (b *httpSessions) bind(id *Identity, s Session) {
	if id == nil {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]httpSessionOwner{}
	}
	b.m[s.ID] = httpSessionOwner{identity: id.Name, until: now.Add(2*s.TTL + time.Minute)}
	if n := len(b.m); n >= 1024 && n&(n-1) == 0 { // sweep at powers of two
		for k, v := range b.m {
			if now.After(v.until) {
				delete(b.m, k)
			}
		}
	}
}

func (b *httpSessions) unbind(sid string) {
	b.mu.Lock()
	delete(b.m, sid)
	b.mu.Unlock()
}

func (b *httpSessions) owns(id *Identity, sid string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.m[sid]
	return ok && id != nil && o.identity == id.Name && time.Now().Before(o.until)
}
