package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/wire/httpwire"
)

// Events: GET /v1/events (a server-sent event stream) and
// /v1/events/recent.

func httpEvent(e Event) httpwire.Event {
	return httpwire.Event{
		Type: string(e.Type), Name: e.Name, Owner: e.Owner, Token: e.Token, Time: httpwire.Time(e.Time),
		HandoffMS: float64(e.Handoff) / float64(time.Millisecond), Waiters: e.Waiters,
	}
}

// httpVisible reports whether the caller gets event e of a stream.
func httpVisible(id *Identity, e Event, prefix string, exact bool) bool {
	if e.Type == EventOverflow {
		return true
	}
	if exact && e.Name != prefix {
		return false
	}
	return id.Allowed(e.Name, AccessRead)
}

// events serves GET /v1/events?prefix=P (or ?name=N): the preamble has
// checked read access on P (or N).
func (h *httpAPI) events(q *httpReq, a *httpArgs) {
	prefix, exact := a.prefix, a.exact
	if exact {
		prefix = a.name
	}
	ctx, cancel := h.drainable(q.r.Context())
	defer cancel()
	ch := h.b.Subscribe(ctx, prefix)
	rc := http.NewResponseController(q.w)
	hdr := q.w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no")
	q.w.WriteHeader(http.StatusOK)
	// The subscription is registered: flushing now tells the client that
	// every later change will reach it.
	write := func(s []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := q.w.Write(s); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write([]byte(": subscribed\n\n")) {
		return
	}
	tick := time.NewTicker(httpHeartbeat)
	defer tick.Stop()
	var buf bytes.Buffer
	for {
		select {
		case e, open := <-ch:
			if !open {
				return
			}
			if !httpVisible(q.id, e, prefix, exact) {
				continue
			}
			buf.Reset()
			b, _ := json.Marshal(httpEvent(e))
			fmt.Fprintf(&buf, "event: %s\ndata: %s\n\n", e.Type, b)
			if !write(buf.Bytes()) {
				return
			}
		case <-tick.C:
			if !write([]byte(": heartbeat\n\n")) {
				return
			}
		}
	}
}

// httpMaxRecent caps ?n= of /v1/events/recent.
const httpMaxRecent = 10000

func (h *httpAPI) recent(q *httpReq, a *httpArgs) {
	n := 100
	if s := q.r.URL.Query().Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > httpMaxRecent {
			h.fail(q, &leasehold.InvalidError{Field: "n", Reason: fmt.Sprintf("%q must be an integer in [1, %d]", s, httpMaxRecent)})
			return
		}
		n = v
	}
	prefix, exact := a.prefix, a.exact
	if exact {
		prefix = a.name
	}
	out := httpwire.Events{Events: []httpwire.Event{}}
	for _, e := range h.b.Recent(n) {
		if e.Type == EventOverflow || !strings.HasPrefix(e.Name, prefix) || !httpVisible(q.id, e, prefix, exact) {
			continue
		}
		out.Events = append(out.Events, httpEvent(e))
	}
	h.json(q, http.StatusOK, out)
}
