package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Long-polls, draining and event streams over HTTP.

func TestWaitLongPoll(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	r := ts.do("POST", "/v1/leases/w/acquire", "", `{"owner":"holder","ttl_ms":60000}`)
	ts.want(r, 200, "")
	tok := r.num("token")
	// A short wait times out with the holder.
	ts.want(ts.do("POST", "/v1/leases/w/acquire", "", `{"owner":"w0","ttl_ms":60000,"wait_ms":20}`), 409, "held")

	got := make(chan htResp, 1)
	go func() {
		got <- ts.do("POST", "/v1/leases/w/acquire", "", `{"owner":"w1","ttl_ms":60000,"wait_ms":60000}`)
	}()
	htWaitFor(t, func() bool { return len(ts.eng.Waiters("w")) == 1 })
	r = ts.do("GET", "/v1/leases/w", "", "")
	ws, _ := r.json["waiters"].([]any)
	if len(ws) != 1 {
		t.Fatalf("waiters %s", r.body)
	}
	w0 := ws[0].(map[string]any)
	if w0["owner"] != "w1" || w0["since"] == "" || w0["waited_ms"].(float64) < 0 {
		t.Errorf("waiter %v", w0)
	}
	ts.want(ts.do("POST", "/v1/leases/w/release", "", fmt.Sprintf(`{"owner":"holder","token":%v}`, tok)), 204, "")
	r = <-got
	ts.want(r, 200, "")
	if r.str("owner") != "w1" || r.num("token") <= tok {
		t.Errorf("waiter's grant %s", r.body)
	}

	// A client that goes away leaves the queue.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan htResp, 1)
	go func() {
		done <- ts.doCtx(ctx, "POST", "/v1/leases/w/acquire", "", `{"owner":"w2","ttl_ms":60000,"wait_ms":60000}`)
	}()
	htWaitFor(t, func() bool { return len(ts.eng.Waiters("w")) == 1 })
	cancel()
	<-done
	htWaitFor(t, func() bool { return len(ts.eng.Waiters("w")) == 0 })
	if rec, err := ts.eng.Get(context.Background(), "w"); err != nil || rec.Owner != "w1" {
		t.Errorf("after the waiter left: %+v, %v", rec, err)
	}
}

// TestDrain: a graceful shutdown ends long-polls with 503 at once.
func TestDrain(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	ts.want(ts.do("POST", "/v1/leases/d/acquire", "", `{"owner":"holder","ttl_ms":60000}`), 200, "")
	got := make(chan htResp, 1)
	go func() {
		got <- ts.do("POST", "/v1/leases/d/acquire", "", `{"owner":"w","ttl_ms":60000,"wait_ms":60000}`)
	}()
	htWaitFor(t, func() bool { return len(ts.eng.Waiters("d")) == 1 })
	ts.api.cancelDrain()
	r := <-got
	ts.want(r, 503, "unavailable")
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	if rec, err := ts.eng.Get(context.Background(), "d"); err != nil || rec.Owner != "holder" {
		t.Errorf("holder after drain: %+v, %v", rec, err)
	}
}

// htSSE reads a server-sent event stream.
type htSSE struct {
	cancel context.CancelFunc
	events chan [2]string // event, data
}

func (ts *htServer) subscribe(query, token string) *htSSE {
	ts.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.srv.URL+"/v1/events?"+query, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		ts.t.Fatalf("events: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	s := &htSSE{cancel: cancel, events: make(chan [2]string, 100)}
	go func() {
		defer res.Body.Close()
		defer close(s.events)
		sc := bufio.NewScanner(res.Body)
		var ev string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				ev = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				s.events <- [2]string{ev, v}
			}
		}
	}()
	ts.t.Cleanup(cancel)
	return s
}

func (s *htSSE) next(t *testing.T) (string, map[string]any) {
	t.Helper()
	select {
	case e, ok := <-s.events:
		if !ok {
			t.Fatal("event stream ended")
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(e[1]), &m); err != nil {
			t.Fatalf("event data %q: %v", e[1], err)
		}
		return e[0], m
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30s")
	}
	return "", nil
}

func TestEvents(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{Auth: htAuth(t)})
	all := ts.subscribe("prefix=team/", htTeam)
	one := ts.subscribe("name=team/a", htTeam)
	body := `{"owner":"x","ttl_ms":60000}`
	ts.want(ts.do("POST", "/v1/leases/team/ab/acquire", htTeam, body), 200, "")
	ts.want(ts.do("POST", "/v1/leases/other/a/acquire", htOther, body), 200, "")
	r := ts.do("POST", "/v1/leases/team/a/acquire", htTeam, body)
	ts.want(r, 200, "")
	ts.want(ts.do("POST", "/v1/leases/team/a/release", htTeam, fmt.Sprintf(`{"owner":"x","token":%v}`, r.num("token"))), 204, "")

	var seen []string
	for i := 0; i < 3; i++ {
		ev, m := all.next(t)
		if ev != m["type"] {
			t.Errorf("event %q with data type %v", ev, m["type"])
		}
		seen = append(seen, fmt.Sprintf("%s %s", ev, m["name"]))
	}
	if strings.Join(seen, ",") != "granted team/ab,granted team/a,released team/a" {
		t.Errorf("prefix stream: %v", seen)
	}
	seen = nil
	for i := 0; i < 2; i++ {
		ev, m := one.next(t)
		seen = append(seen, fmt.Sprintf("%s %s", ev, m["name"]))
		if m["time"] == "" || m["owner"] != "x" {
			t.Errorf("event data %v", m)
		}
	}
	if strings.Join(seen, ",") != "granted team/a,released team/a" {
		t.Errorf("name stream: %v", seen)
	}
	// Recent: the caller sees only what it may read.
	r = ts.do("GET", "/v1/events/recent?n=100", htRead, "")
	ts.want(r, 200, "")
	if evs := r.json["events"].([]any); len(evs) != 4 {
		t.Errorf("reader's recent events: %s", r.body)
	}
	r = ts.do("GET", "/v1/events/recent?n=100&prefix=team/", htTeam, "")
	ts.want(r, 200, "")
	if evs := r.json["events"].([]any); len(evs) != 3 {
		t.Errorf("team's recent events: %s", r.body)
	}
	r = ts.do("GET", "/v1/events/recent?n=1", htRead, "")
	if evs := r.json["events"].([]any); len(evs) != 1 || evs[0].(map[string]any)["type"] != "released" {
		t.Errorf("the latest event: %s", r.body)
	}
}
