package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/servertest"
	"github.com/leasehold/leasehold/wire/resp"
)

// fakeClient is a request's client for the quota tests.
type fakeClient string

func (c fakeClient) quotaKey() string { return string(c) }

// qtBackend is a quotaBackend over a fresh engine with a clock the test
// moves.
type qtBackend struct {
	*quotaBackend
	t       *testing.T
	clockMu sync.Mutex // the clock's (qb.mu is the quota backend's own)
	now     time.Time
}

func newQTBackend(t *testing.T, q Quotas) *qtBackend {
	qb := &qtBackend{quotaBackend: newQuotaBackend(rtEngine(t), q, NewMetrics(nil)), t: t, now: time.Unix(1_000_000, 0)}
	qb.quotaBackend.now = func() time.Time {
		qb.clockMu.Lock()
		defer qb.clockMu.Unlock()
		return qb.now
	}
	t.Cleanup(func() { qb.Close() })
	return qb
}

func (qb *qtBackend) advance(d time.Duration) {
	qb.clockMu.Lock()
	qb.now = qb.now.Add(d)
	qb.clockMu.Unlock()
}

func (qb *qtBackend) acquire(client, name string, ttl time.Duration, data int) (leasehold.Record, error) {
	ctx := withQuotaClient(context.Background(), fakeClient(client))
	return qb.Acquire(ctx, AcquireRequest{AcquireRequest: leasehold.AcquireRequest{
		Name: name, Owner: "o", TTL: ttl, Data: make([]byte, data)}})
}

// mustQuota checks err is a QuotaError of that resource and that the
// refused name is not held (nothing changed).
func (qb *qtBackend) mustQuota(what string, err error, resource, name string) {
	qb.t.Helper()
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Resource != resource {
		qb.t.Fatalf("%s: %v, want a %s QuotaError", what, err, resource)
	}
	if !strings.Contains(qe.Error(), "nothing was changed") || !strings.Contains(qe.Error(), quotaFlags[resource]) {
		qb.t.Errorf("%s: the error %q does not name its flag or say nothing changed", what, qe.Error())
	}
	if _, err := qb.Get(context.Background(), name); !errors.Is(err, leasehold.ErrNotFound) {
		qb.t.Errorf("%s: the refused lease %s: %v, want not found", what, name, err)
	}
}

func (qb *qtBackend) mustOK(what string, err error) {
	qb.t.Helper()
	if err != nil {
		qb.t.Fatalf("%s: %v", what, err)
	}
}

// TestQuotaLeases (issue 26: one writer's 2,000 leases of 64 KiB took
// 527 MB): a client holds at most Quotas.Leases; a release, a force
// release, an expiry or a new grant of the name gives its place back; a
// retry's answer (the same grant) takes no second place; other clients
// and calls from inside the process are not counted.
func TestQuotaLeases(t *testing.T) {
	qb := newQTBackend(t, Quotas{Leases: 3})
	ctx := context.Background()
	a1, err := qb.acquire("a", "q/1", time.Minute, 0)
	qb.mustOK("a's first", err)
	_, err = qb.acquire("a", "q/2", 10*time.Second, 0)
	qb.mustOK("a's second", err)
	// The same request id again: the same grant, not a new place.
	req := AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: "q/3", Owner: "o", TTL: time.Minute, RequestID: "r"}}
	actx := withQuotaClient(ctx, fakeClient("a"))
	a3, err := qb.Acquire(actx, req)
	qb.mustOK("a's third", err)
	again, err := qb.Acquire(actx, req)
	if err != nil || again.Token != a3.Token {
		t.Fatalf("a's retried third: %v, %v; want its grant %d back", again, err, a3.Token)
	}
	_, err = qb.acquire("a", "q/4", time.Minute, 0)
	qb.mustQuota("a's fourth", err, QuotaLeases, "q/4")
	_, err = qb.acquire("b", "q/b", time.Minute, 0)
	qb.mustOK("b's first, a at its quota", err)
	_, err = qb.Acquire(ctx, AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: "q/inside", Owner: "o", TTL: time.Minute}})
	qb.mustOK("an acquire from inside the process", err)

	qb.mustOK("a releases its first", qb.Release(ctx, "q/1", "o", a1.Token))
	_, err = qb.acquire("a", "q/4", time.Minute, 0)
	qb.mustOK("a's fourth after a release", err)
	_, err = qb.acquire("a", "q/5", time.Minute, 0)
	qb.mustQuota("a's fifth", err, QuotaLeases, "q/5")

	// q/2's TTL (10 s) runs out on the quota's clock: its place is free.
	qb.advance(11 * time.Second)
	_, err = qb.acquire("a", "q/5", time.Minute, 0)
	qb.mustOK("a's fifth after q/2's expiry", err)

	_, err = qb.ForceRelease(ctx, "q/5")
	qb.mustOK("force release of q/5", err)
	_, err = qb.acquire("a", "q/6", time.Minute, 0)
	qb.mustOK("a's sixth after a force release", err)

	// A renewal moves the expiry: q/6 renewed for 10 minutes still counts
	// after its first minute.
	rec, err := qb.Get(ctx, "q/6")
	qb.mustOK("get q/6", err)
	qb.mustOK("renew q/6", qb.Renew(ctx, "q/6", "o", rec.Token, 10*time.Minute))
	qb.advance(2 * time.Minute) // q/3 and q/4 (a minute) have ended here
	for _, n := range []string{"q/7", "q/8"} {
		_, err = qb.acquire("a", n, time.Minute, 0)
		qb.mustOK("a's acquire of "+n+" after q/3 and q/4 ended", err)
	}
	_, err = qb.acquire("a", "q/9", time.Minute, 0)
	qb.mustQuota("a's fourth with q/6 renewed", err, QuotaLeases, "q/9")

	// Another client's grant of a name a had (after it ended) takes it
	// off a's count.
	qb.advance(2 * time.Minute) // q/7 and q/8 have ended; q/6 lives
	if _, err := qb.ForceRelease(ctx, "q/7"); err != nil {
		t.Fatal(err)
	}
	_, err = qb.acquire("b", "q/7", time.Minute, 0)
	qb.mustOK("b's grant of q/7", err)
	qb.mu.Lock()
	n := len(qb.clients["a"].names)
	qb.mu.Unlock()
	if n > 2 {
		t.Errorf("a counts %d leases after q/7 went to b, want at most 2 (q/6 and the ended q/8)", n)
	}
	if v := hdValue(t, qb.metrics.quotaRefusals.WithLabelValues(QuotaLeases)); v != 3 {
		t.Errorf("leasehold_quota_refusals_total{resource=leases} = %v, want 3", v)
	}
}

// TestQuotaData: the data of a client's leases together is bounded.
func TestQuotaData(t *testing.T) {
	qb := newQTBackend(t, Quotas{DataBytes: 100})
	_, err := qb.acquire("a", "d/1", time.Minute, 60)
	qb.mustOK("60 bytes", err)
	_, err = qb.acquire("a", "d/2", time.Minute, 41)
	qb.mustQuota("60 + 41 bytes", err, QuotaData, "d/2")
	r3, err := qb.acquire("a", "d/3", time.Minute, 40)
	qb.mustOK("60 + 40 bytes", err)
	_, err = qb.acquire("b", "d/b", time.Minute, 100)
	qb.mustOK("b's 100 bytes", err)
	qb.mustOK("release d/3", qb.Release(context.Background(), "d/3", "o", r3.Token))
	_, err = qb.acquire("a", "d/2", time.Minute, 40)
	qb.mustOK("60 + 40 bytes after a release", err)
}

// TestQuotaSessions: a client's open sessions are bounded; closing one,
// or its keepalive running out, gives its place back, and a lease
// attached to a session counts while the session lives.
func TestQuotaSessions(t *testing.T) {
	qb := newQTBackend(t, Quotas{Sessions: 2, Leases: 1})
	ctx := withQuotaClient(context.Background(), fakeClient("a"))
	s1, err := qb.OpenSession(ctx, time.Minute)
	qb.mustOK("a's first session", err)
	s2, err := qb.OpenSession(ctx, 10*time.Second)
	qb.mustOK("a's second session", err)
	if _, err := qb.OpenSession(ctx, time.Minute); err == nil {
		t.Fatal("a's third session was opened over its quota of 2")
	} else if qe := (*QuotaError)(nil); !errors.As(err, &qe) || qe.Resource != QuotaSessions {
		t.Fatalf("a's third session: %v, want a sessions QuotaError", err)
	}
	if st := qb.Stats(); st.Sessions != 2 {
		t.Errorf("the engine has %d sessions after the refusal, want 2", st.Sessions)
	}
	bctx := withQuotaClient(context.Background(), fakeClient("b"))
	if _, err := qb.OpenSession(bctx, time.Minute); err != nil {
		t.Fatalf("b's session: %v", err)
	}
	qb.mustOK("close a's first", qb.CloseSession(ctx, s1.ID))
	s3, err := qb.OpenSession(ctx, time.Minute)
	qb.mustOK("a's session after closing one", err)

	// A lease attached to s2 (10 s keepalive) counts while s2 lives, and
	// its place comes back when s2's keepalive runs out on the quota's
	// clock.
	_, err = qb.Acquire(ctx, AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: "s/1", Owner: "o", TTL: time.Hour}, Session: s2.ID})
	qb.mustOK("a lease on s2", err)
	_, err = qb.acquire("a", "s/2", time.Hour, 0)
	qb.mustQuota("a second lease with one on s2", err, QuotaLeases, "s/2")
	qb.advance(11 * time.Second)
	_, err = qb.acquire("a", "s/2", time.Hour, 0)
	qb.mustOK("a lease after s2's keepalive ran out", err)
	// s3 kept alive stays counted: one more session is refused.
	qb.advance(50 * time.Second)
	_, err = qb.KeepAlive(ctx, s3.ID)
	qb.mustOK("keepalive s3", err)
	qb.advance(30 * time.Second)
	if _, err := qb.OpenSession(ctx, time.Minute); err != nil {
		t.Fatalf("a's session with only s3 alive: %v", err)
	}
	if _, err := qb.OpenSession(ctx, time.Minute); err == nil {
		t.Error("a's third session with s3 kept alive was opened over its quota")
	}
}

// TestQuotaWaiters: a client's acquires waiting in queues at once are
// bounded; a refused one is not queued.
func TestQuotaWaiters(t *testing.T) {
	qb := newQTBackend(t, Quotas{Waiters: 2})
	bg := context.Background()
	held, err := qb.acquire("holder", "w/x", time.Minute, 0)
	qb.mustOK("the holder's grant", err)
	ctx, cancel := context.WithCancel(withQuotaClient(bg, fakeClient("a")))
	defer cancel()
	wait := func(owner string) error {
		_, err := qb.Acquire(ctx, AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: "w/x", Owner: owner, TTL: time.Minute}, Wait: time.Hour})
		return err
	}
	done := make(chan error, 2)
	for _, o := range []string{"w1", "w2"} {
		go func() { done <- wait(o) }()
	}
	servertest.WaitFor(t, "two waiters queued", func() bool { return len(qb.Waiters("w/x")) == 2 })
	err = wait("w3")
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Resource != QuotaWaiters {
		t.Fatalf("a third waiter: %v, want a waiters QuotaError", err)
	}
	if n := len(qb.Waiters("w/x")); n != 2 {
		t.Errorf("%d waiters queued after the refusal, want 2", n)
	}
	// The first waiter is granted on release; its waiting place is free.
	qb.mustOK("the holder's release", qb.Release(bg, "w/x", "o", held.Token))
	if err := <-done; err != nil {
		t.Fatalf("the first waiter: %v", err)
	}
	go func() { done <- wait("w3") }()
	servertest.WaitFor(t, "the third waiter queued once a place was free", func() bool { return len(qb.Waiters("w/x")) == 2 })
	cancel()
	for range 2 {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled waiter: %v", err)
		}
	}
	qb.mu.Lock()
	u := qb.clients["a"]
	qb.mu.Unlock()
	if u.waiters != 0 || u.pending != 0 {
		t.Errorf("after every wait ended: %d waiters, %d pending acquires counted, want 0", u.waiters, u.pending)
	}
}

// TestQuotasOverBothPorts: through NewServer, both ports count one
// identity's leases together (HTTP 429 quota-exceeded naming the
// resource, RESP -QUOTA), another identity is not affected, and with
// auth off the client is the address.
func TestQuotasOverBothPorts(t *testing.T) {
	auth := testAuth(t, []TokenConfig{
		{Identity: "a", Token: "token-a-0123456789", Grants: []Grant{{Prefix: "", Access: "write"}}},
		{Identity: "b", Token: "token-b-0123456789", Grants: []Grant{{Prefix: "", Access: "write"}}},
	})
	srv, _ := startServe(t, rtEngine(t), Config{Auth: auth, RESPAddr: "127.0.0.1:0", Quotas: Quotas{Leases: 2}})
	base := "http://" + srv.HTTPAddr().String()
	post := func(token, name string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/leases/"+name+"/acquire", strings.NewReader(`{"owner":"o","ttl_ms":60000}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := post("token-a-0123456789", "p/1"); code != http.StatusOK {
		t.Fatalf("a's HTTP acquire: %d %s", code, body)
	}
	c := rtDial(t, srv.RESPAddr().String())
	rtExpect(t, "AUTH a", c.do("AUTH", "token-a-0123456789"), "+OK")
	rtExpect(t, "a's RESP acquire", c.do("LH.ACQUIRE", "p/2", "o", "60000"), "[")
	rtExpect(t, "a's third, over RESP", c.do("LH.ACQUIRE", "p/3", "o", "60000"), "-"+resp.CodeQuota+" quota exceeded: this client has 2 leases")
	code, body := post("token-a-0123456789", "p/3")
	if code != http.StatusTooManyRequests || !strings.Contains(body, `"urn:leasehold:problem:quota-exceeded"`) || !strings.Contains(body, `"resource":"leases"`) {
		t.Errorf("a's third over HTTP: %d %s; want 429 quota-exceeded naming leases", code, body)
	}
	if code, body := post("token-b-0123456789", "p/3"); code != http.StatusOK {
		t.Errorf("b's acquire, a at its quota: %d %s", code, body)
	}
	// A release over RESP gives the place back to the HTTP side too.
	tok := strings.TrimPrefix(rtFields(c.do("LH.GET", "p/2"))[0], ":")
	rtExpect(t, "a releases p/2", c.do("LH.RELEASE", "p/2", "o", tok), "+OK")
	if code, body := post("token-a-0123456789", "p/4"); code != http.StatusOK {
		t.Errorf("a's HTTP acquire after its RESP release: %d %s", code, body)
	}
	// A force release straight on the backend, which the server's ports
	// did not see, leaves p/1 counted until its expiry (documented).
	if _, err := srv.b.ForceRelease(context.Background(), "p/1"); err != nil {
		t.Fatal(err)
	}
	rtExpect(t, "a's third after a release the ports did not see", c.do("LH.ACQUIRE", "p/5", "o", "60000"), "-"+resp.CodeQuota)

	// Auth off: the client is the address, and every loopback address is
	// one client (the review's F8: a local process used 8 of them to take
	// 8 quotas).
	srv2, _ := startServe(t, rtEngine(t), Config{RESPAddr: "127.0.0.1:0", Quotas: Quotas{Leases: 1}})
	addr := srv2.RESPAddr().String()
	one, two, other := rtDialFrom(t, "127.0.0.1", addr), rtDialFrom(t, "127.0.0.1", addr), rtDialFrom(t, "127.0.0.2", addr)
	rtExpect(t, "127.0.0.1's acquire", one.do("LH.ACQUIRE", "x/1", "o", "60000"), "[")
	rtExpect(t, "127.0.0.1's second, on another connection", two.do("LH.ACQUIRE", "x/2", "o", "60000"), "-"+resp.CodeQuota)
	rtExpect(t, "127.0.0.2's acquire (loopback too)", other.do("LH.ACQUIRE", "x/2", "o", "60000"), "-"+resp.CodeQuota)
	rtExpect(t, "127.0.0.1 force-releases x/1", one.do("LH.FORCERELEASE", "x/1"), "[")
	rtExpect(t, "127.0.0.2's acquire after the release", other.do("LH.ACQUIRE", "x/3", "o", "60000"), "[")
}

// rtDialFrom connects to addr from the local address src.
func rtDialFrom(t *testing.T, src, addr string) *rtConn {
	nc := hdDialFrom(t, src, addr)
	nc.SetDeadline(time.Now().Add(2 * time.Minute))
	return &rtConn{rawConn: rawConn{t: t, nc: nc}, rd: resp.NewReader(bufio.NewReader(nc))}
}

// TestQuotaKeys: an identity is its own client; without one, an address
// is, and all loopback addresses are one.
func TestQuotaKeys(t *testing.T) {
	id := &Identity{Name: "a"}
	for _, c := range []struct {
		id        *Identity
		a, b      string
		sameAsAny bool
	}{
		{nil, "127.0.0.1", "127.0.0.2", true},
		{nil, "127.0.0.1", "::1", true},
		{nil, "10.0.0.1", "10.0.0.2", false},
		{nil, "10.0.0.1", "127.0.0.1", false},
		{id, "10.0.0.1", "10.0.0.2", true},
	} {
		if same := quotaKeyFor(c.id, c.a) == quotaKeyFor(c.id, c.b); same != c.sameAsAny {
			t.Errorf("identity %v: %s and %s one client = %v, want %v", c.id, c.a, c.b, same, c.sameAsAny)
		}
	}
	if quotaKeyFor(id, "10.0.0.1") == quotaKeyFor(nil, "10.0.0.1") {
		t.Error("an identity and its address are one client")
	}
}

// TestQuotaForceReleaseToWaiter (the review's F3): a force release that
// hands the name to a waiter of the same client must not uncount the
// waiter's new lease; it used to, and the client went on to hold twice
// its quota.
func TestQuotaForceReleaseToWaiter(t *testing.T) {
	qb := newQTBackend(t, Quotas{Leases: 2})
	// The force release returns only once the waiter's grant is counted:
	// the order in which the review saw the count go wrong.
	qb.Backend = forceThen{qb.Backend, func() {
		servertest.WaitFor(t, "the waiter's grant counted", func() bool {
			qb.mu.Lock()
			defer qb.mu.Unlock()
			l := qb.leases["f/x"]
			return l != nil && l.client == "m"
		})
	}}
	bg := context.Background()
	_, err := qb.acquire("other", "f/x", time.Minute, 0)
	qb.mustOK("the other client's grant", err)
	_, err = qb.acquire("m", "f/1", time.Minute, 0)
	qb.mustOK("m's first", err)
	done := make(chan error, 1)
	go func() {
		_, err := qb.Acquire(withQuotaClient(bg, fakeClient("m")), AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: "f/x", Owner: "m", TTL: time.Minute}, Wait: time.Minute})
		done <- err
	}()
	servertest.WaitFor(t, "m's waiter queued", func() bool { return len(qb.Waiters("f/x")) == 1 })
	_, err = qb.ForceRelease(bg, "f/x")
	qb.mustOK("the force release", err)
	qb.mustOK("m's waiter", <-done)
	_, err = qb.acquire("m", "f/3", time.Minute, 0)
	qb.mustQuota("m's third lease, holding f/1 and f/x", err, QuotaLeases, "f/3")
}

// forceThen is a Backend whose ForceRelease calls then before returning.
type forceThen struct {
	Backend
	then func()
}

func (b forceThen) ForceRelease(ctx context.Context, name string) (leasehold.Record, error) {
	rec, err := b.Backend.ForceRelease(ctx, name)
	b.then()
	return rec, err
}

// TestQuotaClosedSessionLeases (the review's F4): closing a session ends
// its leases, and the client's count with them; they used to count until
// their expiry as announced (the session's TTL, up to 24 h).
func TestQuotaClosedSessionLeases(t *testing.T) {
	qb := newQTBackend(t, Quotas{Leases: 2})
	ctx := withQuotaClient(context.Background(), fakeClient("a"))
	s, err := qb.OpenSession(ctx, time.Hour)
	qb.mustOK("open", err)
	for _, n := range []string{"c/1", "c/2"} {
		_, err := qb.Acquire(ctx, AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: n, Owner: "o", TTL: time.Hour}, Session: s.ID})
		qb.mustOK("a lease on the session", err)
	}
	_, err = qb.acquire("a", "c/3", time.Hour, 0)
	qb.mustQuota("a third lease", err, QuotaLeases, "c/3")
	qb.mustOK("close the session", qb.CloseSession(ctx, s.ID))
	for _, n := range []string{"c/3", "c/4"} {
		_, err = qb.acquire("a", n, time.Hour, 0)
		qb.mustOK("a lease after closing the session ("+n+")", err)
	}
}

// TestQuotaSemaphoreWaits (the review's F5): a semaphore acquire that
// waits counts as one of its client's waiters; 50 such waits from one
// address were all accepted with --quota-waiters 10.
func TestQuotaSemaphoreWaits(t *testing.T) {
	srv, _ := startServe(t, rtEngine(t), Config{Quotas: Quotas{Waiters: 2}})
	base := "http://" + srv.HTTPAddr().String()
	post := func(ctx context.Context, body string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/semaphores/s/acquire", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := post(context.Background(), `{"owner":"h","ttl_ms":60000,"permits":1}`); code != http.StatusOK {
		t.Fatalf("the holder's permit: %d %s", code, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 2 {
		go post(ctx, fmt.Sprintf(`{"owner":"w%d","ttl_ms":60000,"permits":1,"wait_ms":60000}`, i))
	}
	qb := srv.api.b.(*quotaBackend)
	servertest.WaitFor(t, "two semaphore waits counted", func() bool {
		qb.mu.Lock()
		defer qb.mu.Unlock()
		u := qb.clients["loopback"]
		return u != nil && u.waiters == 2
	})
	code, body := post(context.Background(), `{"owner":"w3","ttl_ms":60000,"permits":1,"wait_ms":60000}`)
	if code != http.StatusTooManyRequests || !strings.Contains(body, `"resource":"waiters"`) {
		t.Errorf("a third semaphore wait with a quota of 2: %d %s; want 429 naming waiters", code, body)
	}
	cancel()
	servertest.WaitFor(t, "the cancelled waits uncounted", func() bool {
		qb.mu.Lock()
		defer qb.mu.Unlock()
		u := qb.clients["loopback"]
		return u == nil || u.waiters == 0
	})
}

// TestRESPSubscriptionShare (issue 26: 4 connections × 65,536
// subscriptions; the total is now bounded, and one client must not take
// all of it): a client's subscriptions, over all its connections, are at
// most a quarter of the server's (at least 1,024); another client (here
// an identity) still subscribes, and closing a connection gives its
// share back.
func TestRESPSubscriptionShare(t *testing.T) {
	m := NewMetrics(nil)
	auth := testAuth(t, []TokenConfig{
		{Identity: "a", Token: "token-a-0123456789", Grants: []Grant{{Prefix: "", Access: "read"}}},
		{Identity: "b", Token: "token-b-0123456789", Grants: []Grant{{Prefix: "", Access: "read"}}},
	})
	srv, addr := rtServe(t, rtEngine(t), RESPOptions{Metrics: m, MaxSubscriptions: 8192, Auth: auth})
	from := func(token string) *rtConn {
		c := rtDialFrom(t, "127.0.0.1", addr)
		rtExpect(t, "AUTH", c.do("AUTH", token), "+OK")
		return c
	}
	// subscribe pipelines n subscriptions on c and returns the last reply.
	subscribe := func(c *rtConn, prefix string, n int) string {
		var b []byte
		for i := range n {
			b = resp.AppendCommand(b, "LH.SUBSCRIBE", prefix+strconv.Itoa(i))
		}
		c.send(string(b))
		var last string
		for range n {
			last = c.read()
		}
		return last
	}
	a1, a2 := from("token-a-0123456789"), from("token-a-0123456789")
	rtExpect(t, "a's first 1,024 subscriptions", subscribe(a1, "a1/", 1024), "[$subscribe $a1/1023 :1024")
	rtExpect(t, "a's next 1,024 on another connection", subscribe(a2, "a2/", 1024), "[$subscribe $a2/1023 :1024")
	a3 := from("token-a-0123456789")
	rtExpect(t, "a's 2,049th", a3.do("LH.SUBSCRIBE", "a3/0"), "-"+resp.CodeQuota+" quota exceeded: this client has 2048 subscriptions")
	b := from("token-b-0123456789")
	rtExpect(t, "another identity's subscription", b.do("LH.SUBSCRIBE", "b/0"), "[$subscribe $b/0 :1")
	if v := hdValue(t, m.quotaRefusals.WithLabelValues(QuotaSubscriptions)); v != 1 {
		t.Errorf("leasehold_quota_refusals_total{resource=subscriptions} = %v, want 1", v)
	}
	a1.nc.Close()
	servertest.WaitFor(t, "a's closed connection's subscriptions to be given back", func() bool { return srv.subs.Load() == 1024+1 })
	rtExpect(t, "a's subscription after it closed a connection", a3.do("LH.SUBSCRIBE", "a3/0"), "[$subscribe $a3/0 :1")
}

// TestQuotaParkedPlaces: a place kept between two polls (engine_park.go)
// counts as one of its client's waiters until the next poll takes it back
// or its grace has passed (the red team of issue 27: one client kept 5,000
// waiters queued, with 64 KiB each, on a quota of 1,000).
func TestQuotaParkedPlaces(t *testing.T) {
	qb := newQTBackend(t, Quotas{Waiters: 2})
	_, err := qb.acquire("holder", "p/x", time.Minute, 0)
	qb.mustOK("the holder's grant", err)
	ctx := withQuotaClient(context.Background(), fakeClient("a"))
	poll := func(rid string) error {
		_, err := qb.Acquire(ctx, AcquireRequest{AcquireRequest: leasehold.AcquireRequest{
			Name: "p/x", Owner: "w-" + rid, RequestID: rid, TTL: time.Minute}, Wait: time.Second})
		return err
	}
	for _, rid := range []string{"a", "b"} {
		if err := poll(rid); !errors.Is(err, leasehold.ErrHeld) {
			t.Fatalf("poll %s: %v, want held (its wait ran out)", rid, err)
		}
	}
	if n := len(qb.Waiters("p/x")); n != 2 {
		t.Fatalf("%d places kept, want 2", n)
	}
	err = poll("c")
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Resource != QuotaWaiters {
		t.Fatalf("a third waiter beside two kept places: %v, want a waiters QuotaError", err)
	}
	// The next poll of a kept place takes it back: not refused.
	if err := poll("a"); !errors.Is(err, leasehold.ErrHeld) {
		t.Fatalf("a's next poll: %v, want held (its place taken back, not refused)", err)
	}
	// Past the grace, the places no longer count.
	qb.advance(ParkGrace + quotaSweepEvery + time.Second)
	if err := poll("c"); !errors.Is(err, leasehold.ErrHeld) {
		t.Fatalf("a waiter once the kept places' grace passed: %v, want held", err)
	}
}

// TestQuotaParkedPermitPlaces: a semaphore's place kept between two polls
// counts as one of its client's waiters too, until its next poll takes it
// back (which is not refused).
func TestQuotaParkedPermitPlaces(t *testing.T) {
	qb := newQTBackend(t, Quotas{Waiters: 2})
	ctx := withQuotaClient(context.Background(), fakeClient("a"))
	_, err := qb.AcquirePermit(withQuotaClient(context.Background(), fakeClient("holder")), "p/s", 1,
		AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Owner: "h", TTL: time.Minute}})
	qb.mustOK("the holder's permit", err)
	poll := func(rid string) error {
		_, err := qb.AcquirePermit(ctx, "p/s", 1, AcquireRequest{AcquireRequest: leasehold.AcquireRequest{
			Owner: "w-" + rid, RequestID: rid, TTL: time.Minute}, Wait: time.Second})
		return err
	}
	for _, rid := range []string{"a", "b"} {
		if err := poll(rid); !errors.Is(err, leasehold.ErrNoPermit) {
			t.Fatalf("poll %s: %v, want no permit (its wait ran out)", rid, err)
		}
	}
	if n := len(qb.Waiters("p/s/permit/0")); n != 2 {
		t.Fatalf("%d places kept, want 2", n)
	}
	var qe *QuotaError
	if err := poll("c"); !errors.As(err, &qe) || qe.Resource != QuotaWaiters {
		t.Fatalf("a third waiter beside two kept places: %v, want a waiters QuotaError", err)
	}
	if err := poll("a"); !errors.Is(err, leasehold.ErrNoPermit) {
		t.Fatalf("a's next poll: %v, want no permit (its place taken back, not refused)", err)
	}
}

// TestQuotaNoLimit: a negative quota (NoQuota, what serve's --quota-* 0
// gives) is no limit, a zero one the default. Before the fix the
// defaults' orDefault turned NoQuota back into the default: the red team
// of issue 27 had its 100,001st lease refused with --quota-leases 0.
func TestQuotaNoLimit(t *testing.T) {
	qb := newQTBackend(t, Quotas{Leases: NoQuota, DataBytes: NoQuota, Sessions: NoQuota, Waiters: NoQuota})
	if l := qb.lim; l.Leases >= 0 || l.DataBytes >= 0 || l.Sessions >= 0 || l.Waiters >= 0 {
		t.Fatalf("quotas of NoQuota became %+v, want every one negative (no limit)", l)
	}
	def := newQuotaBackend(rtEngine(t), Quotas{}, nil)
	defer def.Close()
	if want := (Quotas{Leases: DefaultQuotaLeases, DataBytes: DefaultQuotaDataBytes, Sessions: DefaultQuotaSessions, Waiters: DefaultQuotaWaiters}); def.lim != want {
		t.Errorf("zero quotas became %+v, want the defaults %+v", def.lim, want)
	}
	// More sessions than the default quota, all from one client.
	ctx := withQuotaClient(context.Background(), fakeClient("a"))
	for i := range DefaultQuotaSessions + 1 {
		if _, err := qb.OpenSession(ctx, time.Minute); err != nil {
			t.Fatalf("session %d with no sessions quota: %v", i+1, err)
		}
	}
}
