package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
)

// A give-up (AcquireRequest.GiveUp: RESP's GIVEUP id, HTTP's give_up)
// releases the grant its request id holds and answers with it, and never
// takes the lease (CI run 79: the Go client's give-up was a try, which a
// loaded server answered after the lease had become free, with a grant
// for a caller that had gone). Bad input is refused and changes nothing.

// TestRESPGiveUp: on each backend, GIVEUP on a free lease is NOTFOUND, on
// another's HELD, on the request's own grant that grant, released; a
// GIVEUP with no id, another REQID, a WAIT or a SESSION is INVALID and
// changes nothing.
func TestRESPGiveUp(t *testing.T) {
	for name, mk := range rtBackends(t) {
		t.Run(name, func(t *testing.T) {
			_, addr := rtServe(t, mk(t), RESPOptions{})
			c := rtDial(t, addr)
			rtExpect(t, "GIVEUP on a free lease", c.do("LH.ACQUIRE", "free", "gone", "60000", "GIVEUP", "w1"), "-NOTFOUND")
			rtExpect(t, "GET after it", c.do("LH.GET", "free"), "$nil")

			held := rtFields(c.do("LH.ACQUIRE", "held", "holder", "60000"))
			rtExpect(t, "GIVEUP on another's lease", c.do("LH.ACQUIRE", "held", "gone", "60000", "GIVEUP", "w2"), "-HELD")
			rtExpect(t, "GET after it", c.do("LH.GET", "held"), "["+held[0]+" ")

			own := rtFields(c.do("LH.ACQUIRE", "own", "gone", "60000", "REQID", "w3"))
			got := rtFields(c.do("LH.ACQUIRE", "own", "gone", "60000", "REQID", "w3", "GIVEUP", "w3"))
			if len(got) != len(own) || len(got) < 4 || got[0] != own[0] {
				t.Fatalf("GIVEUP of the request holding the lease = %q, want its grant %q", got, own)
			}
			rtExpect(t, "GET after the give-up of the request's own grant", c.do("LH.GET", "own"), "$nil")

			for i, bad := range [][]string{
				{"GIVEUP", ""},
				{"REQID", "a", "GIVEUP", "b"},
				{"GIVEUP", "w4", "WAIT", "100"},
				{"GIVEUP", "w5", "SESSION", "s1"},
			} {
				lease := fmt.Sprintf("bad%d", i)
				args := append([]string{"LH.ACQUIRE", lease, "gone", "60000"}, bad...)
				rtExpect(t, strings.Join(bad, " "), c.do(args...), "-INVALID give")
				rtExpect(t, "GET after "+strings.Join(bad, " "), c.do("LH.GET", lease), "$nil")
			}
		})
	}
}

// TestRESPGiveUpScoped: with auth on, another identity's GIVEUP with the
// holder's owner and request id is not the holder's: HELD, and the grant
// stays.
func TestRESPGiveUpScoped(t *testing.T) {
	_, addr := rtServe(t, rtEngine(t), RESPOptions{Auth: replayAuth(t)})
	alice, mallory := rtDial(t, addr), rtDial(t, addr)
	rtExpect(t, "alice AUTH", alice.do("AUTH", "alice-token"), "+OK")
	rtExpect(t, "mallory AUTH", mallory.do("AUTH", "mallory-token"), "+OK")
	g := rtFields(alice.do("LH.ACQUIRE", "jobs/1", "alice", "60000", "REQID", "job-1"))
	rtExpect(t, "mallory's GIVEUP", mallory.do("LH.ACQUIRE", "jobs/1", "alice", "60000", "GIVEUP", "job-1"), "-HELD")
	rtExpect(t, "GET after it", alice.do("LH.GET", "jobs/1"), "["+g[0]+" ")
}

// TestHTTPGiveUp is TestRESPGiveUp over HTTP (the engine), with a
// semaphore's acquire, which takes no give_up.
func TestHTTPGiveUp(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	ts.want(ts.do("POST", "/v1/leases/free/acquire", "", `{"owner":"gone","ttl_ms":60000,"request_id":"w1","give_up":true}`), 404, "not-found")
	ts.want(ts.do("GET", "/v1/leases/free", "", ""), 404, "")

	h := ts.do("POST", "/v1/leases/held/acquire", "", `{"owner":"holder","ttl_ms":60000}`)
	ts.want(h, 200, "")
	ts.want(ts.do("POST", "/v1/leases/held/acquire", "", `{"owner":"gone","ttl_ms":60000,"request_id":"w2","give_up":true}`), 409, "held")
	if g := ts.do("GET", "/v1/leases/held", "", ""); g.num("token") != h.num("token") || g.str("owner") != "holder" {
		t.Fatalf("after the give-up on another's lease: %s, want %s", g.body, h.body)
	}

	own := ts.do("POST", "/v1/leases/own/acquire", "", `{"owner":"gone","ttl_ms":60000,"request_id":"w3"}`)
	ts.want(own, 200, "")
	got := ts.do("POST", "/v1/leases/own/acquire", "", `{"owner":"gone","ttl_ms":60000,"request_id":"w3","give_up":true}`)
	ts.want(got, 200, "")
	if got.num("token") != own.num("token") {
		t.Fatalf("give-up of the request holding the lease: %s, want its grant %s", got.body, own.body)
	}
	ts.want(ts.do("GET", "/v1/leases/own", "", ""), 404, "")

	for _, bad := range []struct{ path, body, get string }{
		{"/v1/leases/bad0/acquire", `{"owner":"gone","ttl_ms":60000,"give_up":true}`, "/v1/leases/bad0"},
		{"/v1/leases/bad1/acquire", `{"owner":"gone","ttl_ms":60000,"request_id":"w4","wait_ms":100,"give_up":true}`, "/v1/leases/bad1"},
		{"/v1/semaphores/bad2/acquire", `{"owner":"gone","ttl_ms":60000,"permits":2,"request_id":"w5","give_up":true}`, "/v1/leases/bad2/permit/0"},
		// null was taken as absent: the acquire took the lease.
		{"/v1/leases/bad3/acquire", `{"owner":"gone","ttl_ms":60000,"request_id":"w6","give_up":null}`, "/v1/leases/bad3"},
		{"/v1/leases/bad4/acquire", `{"owner":"gone","ttl_ms":60000,"request_id":"w7","give_up":"true"}`, "/v1/leases/bad4"},
		{"/v1/leases/bad5/acquire", `{"owner":"gone","ttl_ms":60000,"request_id":"w8","session":"s1","give_up":true}`, "/v1/leases/bad5"},
	} {
		ts.want(ts.do("POST", bad.path, "", bad.body), 400, "invalid")
		ts.want(ts.do("GET", bad.get, "", ""), 404, "")
	}
}

// TestHTTPGiveUpKeptPlaceGranted: a waiter's place, kept after its poll
// ran out, is granted by the holder's release; the waiter's give-up then
// releases that grant. It refreshed it with the give-up's TTL and data
// instead, so a give-up of 24 h left the lease to nobody for a day when
// the caller's release did not follow (the red team of 55bc5e7).
func TestHTTPGiveUpKeptPlaceGranted(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	h := ts.do("POST", "/v1/leases/kept/acquire", "", `{"owner":"holder","ttl_ms":60000}`)
	ts.want(h, 200, "")
	ts.want(ts.do("POST", "/v1/leases/kept/acquire", "", `{"owner":"gone","ttl_ms":60000,"request_id":"w","wait_ms":1000}`), 409, "held")
	ts.want(ts.do("POST", "/v1/leases/kept/release", "", fmt.Sprintf(`{"owner":"holder","token":%v}`, h.num("token"))), 204, "")
	held := ts.do("GET", "/v1/leases/kept", "", "")
	if held.str("owner") != "gone" {
		t.Fatalf("after the release: %s, want the kept place granted", held.body)
	}
	got := ts.do("POST", "/v1/leases/kept/acquire", "", `{"owner":"gone","ttl_ms":86400000,"request_id":"w","data":"CHANGED","give_up":true}`)
	ts.want(got, 200, "")
	if got.num("token") != held.num("token") {
		t.Fatalf("the give-up answered %s, want the kept place's grant %s", got.body, held.body)
	}
	ts.want(ts.do("GET", "/v1/leases/kept", "", ""), 404, "")
}

// cancelAfterTry is a store whose TryAcquire, once armed, cancels a
// context after it has been applied: a client gone between a proxy's
// give-up's try and its release.
type cancelAfterTry struct {
	leasehold.Store
	armed  *atomic.Bool
	cancel context.CancelFunc
}

func (s cancelAfterTry) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	rec, err := s.Store.TryAcquire(ctx, req)
	if s.armed.Load() {
		s.cancel()
	}
	return rec, err
}

// TestProxyGiveUpCarriedThrough: in proxy mode a give-up renews nothing
// of the request's grant (its TTL and data were the give-up's), and, once
// it has begun, releases that grant even if its caller goes before the
// release (the grant stayed, renewed for the give-up's day: the red
// team's re-check of 264b599); the release is an event, as any other.
func TestProxyGiveUpCarriedThrough(t *testing.T) {
	mem := memory.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	armed := new(atomic.Bool)
	p := NewProxy(cancelAfterTry{Store: mem, armed: armed, cancel: cancel}, ProxyConfig{})
	defer p.Close()
	req := leasehold.AcquireRequest{Name: "n", Owner: "gone", RequestID: "r", TTL: 30 * time.Second, Data: []byte("orig")}
	g, err := p.Acquire(context.Background(), AcquireRequest{AcquireRequest: req})
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	giveUp := req
	giveUp.TTL, giveUp.Data = 24*time.Hour, []byte("new")
	got, err := p.Acquire(ctx, AcquireRequest{AcquireRequest: giveUp, GiveUp: true})
	if err != nil || got.Token != g.Token || got.TTL != req.TTL || string(got.Data) != "orig" {
		t.Errorf("the give-up answered %+v, %v; want the grant %d unchanged (TTL %v, data %q)", got, err, g.Token, req.TTL, "orig")
	}
	if rec, err := mem.Get(context.Background(), "n"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("after a give-up whose caller went before its release: %+v, %v; want the grant released", rec, err)
	}
	released := false
	for _, ev := range p.Recent(100) {
		released = released || ev.Type == EventReleased && ev.Token == g.Token
	}
	if !released {
		t.Errorf("no released event for the grant the give-up released: %+v", p.Recent(100))
	}
}

// TestEngineGiveUpCallerGone: a give-up whose client has already gone (its
// context ended: an HTTP client that closed its connection at once) is
// carried through; it was dropped, and the grant kept for its TTL (the
// red team's re-check of 5aa2e76: 2 of 40 tries).
func TestEngineGiveUpCallerGone(t *testing.T) {
	e := rtEngine(t).(*Engine)
	defer e.Close()
	req := leasehold.AcquireRequest{Name: "n", Owner: "gone", RequestID: "r", TTL: time.Minute}
	g, err := e.Acquire(context.Background(), AcquireRequest{AcquireRequest: req})
	if err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if got, err := e.Acquire(gone, AcquireRequest{AcquireRequest: req, GiveUp: true}); err != nil || got.Token != g.Token {
		t.Errorf("give-up with its caller gone = %+v, %v; want the grant %d, released", got, err, g.Token)
	}
	if rec, err := e.Get(context.Background(), "n"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("after the give-up: %+v, %v; want the lease free", rec, err)
	}
}

// holdFirstTry is a store whose first TryAcquire once armed waits until
// release is closed (so that a second caller is waiting for the name's
// lock when the first lets it go).
type holdFirstTry struct {
	leasehold.Store
	armed   *atomic.Bool
	once    *sync.Once
	release chan struct{}
}

func (s holdFirstTry) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if s.armed.Load() {
		s.once.Do(func() { <-s.release })
	}
	return s.Store.TryAcquire(ctx, req)
}

// TestProxyGiveUpsAtOnce: two give-ups of one request at once release its
// grant once: one answers the grant, the other finds the lease free, and
// one released event is reported. Both released it, each with an event
// (the store's release is idempotent), when the second came between the
// first's try and its release (the red team's re-check of 5aa2e76).
func TestProxyGiveUpsAtOnce(t *testing.T) {
	release := make(chan struct{})
	armed := new(atomic.Bool)
	p := NewProxy(holdFirstTry{Store: memory.New(), armed: armed, once: new(sync.Once), release: release}, ProxyConfig{})
	defer p.Close()
	req := leasehold.AcquireRequest{Name: "n", Owner: "gone", RequestID: "r", TTL: time.Minute}
	g, err := p.Acquire(context.Background(), AcquireRequest{AcquireRequest: req})
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := p.Acquire(context.Background(), AcquireRequest{AcquireRequest: req, GiveUp: true})
			errs <- err
		}()
	}
	time.Sleep(200 * time.Millisecond) // both under way: the first held in its try, the second waiting for the lock
	close(release)
	var ok, free int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, leasehold.ErrNotFound):
			free++
		default:
			t.Errorf("a give-up: %v", err)
		}
	}
	released := 0
	for _, ev := range p.Recent(100) {
		if ev.Type == EventReleased && ev.Token == g.Token {
			released++
		}
	}
	if ok != 1 || free != 1 || released != 1 {
		t.Errorf("two give-ups at once: %d answered the grant, %d found it free, %d released events; want 1, 1, 1", ok, free, released)
	}
}

// TestProxyReleaseAgainNoEvent: a grant released again (twice by its
// holder, or by its holder after a give-up released it) is reported
// released once, and counted free once. The store answers a repeated
// release as done, and the proxy emitted a released event for each and
// counted the lease freed twice (the red team's round on 6b7db6f: 3 of 3
// give-ups then releases, 1 of 1 double releases, on memory and SQLite).
func TestProxyReleaseAgainNoEvent(t *testing.T) {
	ctx := context.Background()
	p := NewProxy(memory.New(), ProxyConfig{})
	defer p.Close()
	countReleased := func(token uint64) (n int) {
		for _, ev := range p.Recent(100) {
			if ev.Type == EventReleased && ev.Token == token {
				n++
			}
		}
		return n
	}
	req := leasehold.AcquireRequest{Name: "n", Owner: "h", RequestID: "r1", TTL: time.Minute}
	g, err := p.Acquire(ctx, AcquireRequest{AcquireRequest: req})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := p.Release(ctx, "n", "h", g.Token); err != nil {
			t.Fatalf("release %d: %v", i+1, err)
		}
	}
	if n := countReleased(g.Token); n != 1 {
		t.Errorf("a grant released twice: %d released events, want 1", n)
	}
	if err := p.Release(ctx, "n", "other", g.Token); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Errorf("another owner's release of the released grant: %v, want ErrNotHeld", err)
	}

	req.RequestID = "r2"
	g2, err := p.Acquire(ctx, AcquireRequest{AcquireRequest: req})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Acquire(ctx, AcquireRequest{AcquireRequest: req, GiveUp: true}); err != nil || got.Token != g2.Token {
		t.Fatalf("give-up: %+v, %v; want the grant %d", got, err, g2.Token)
	}
	if err := p.Release(ctx, "n", "h", g2.Token); err != nil {
		t.Fatalf("the holder's release after the give-up: %v", err)
	}
	if n := countReleased(g2.Token); n != 1 {
		t.Errorf("a give-up then the holder's release: %d released events, want 1", n)
	}
	if h := p.held.Load(); h != 0 {
		t.Errorf("held estimate after two grants, each released twice: %d, want 0", h)
	}
}

// TestGrantSetBound: the proxy forgets the oldest reported grants
// beyond reportedKeep, and keeps the newest.
func TestGrantSetBound(t *testing.T) {
	var r grantSet
	for i := range reportedKeep + 10 {
		r.add(proxyLeaseKey{"n", uint64(i + 1)})
	}
	r.add(proxyLeaseKey{"n", reportedKeep + 10}) // again: no second entry
	if len(r.keys) != reportedKeep || len(r.ring) != reportedKeep {
		t.Fatalf("%d keys, %d in the ring; want %d each", len(r.keys), len(r.ring), reportedKeep)
	}
	for _, tok := range []uint64{1, 10} {
		if r.has(proxyLeaseKey{"n", tok}) {
			t.Errorf("grant %d still remembered past the bound", tok)
		}
	}
	for _, tok := range []uint64{11, reportedKeep + 10} {
		if !r.has(proxyLeaseKey{"n", tok}) {
			t.Errorf("grant %d forgotten within the bound", tok)
		}
	}
}
