package remote_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/testrig/servertest"
)

// TestConformanceEngine runs the whole conformance suite over each
// transport against the durable engine; Reopen restarts the server on the
// same data and port.
func TestConformanceEngine(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{Dir: t.TempDir()}, serveOptions{})
		storetest.Run(t, storetest.Harness{
			Open: func(t testing.TB) leasehold.Store { return ts.open(t, "") },
			Reopen: func(t testing.TB, s leasehold.Store) leasehold.Store {
				s.Close()
				ts.restart()
				return ts.open(t, "")
			},
			Histories: giveUpHistories,
		})
	})
}

// TestConformanceProxy runs the suite over each transport against a Proxy
// in front of the memory store.
func TestConformanceProxy(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startBackend(t, tr, server.NewProxy(memory.New(), server.ProxyConfig{}), serveOptions{})
		query := map[string]string{"resp": "?conns=1"}[tr.name] // RESP: every call pipelined on one connection
		storetest.Run(t, storetest.Harness{
			Open:      func(t testing.TB) leasehold.Store { return ts.open(t, query) },
			Histories: giveUpHistories,
		})
	})
}

// giveUpHistories: a grant that raced with the end of a wait may live for
// as long as the store's give-up runs (remote.GiveUpBound), which is more
// than the suite's default of 1 s when each of its requests takes most of
// a second (CI run 79, a loaded machine: a give-up's try answered 1 s
// late; TestGiveUpTakesNoLease covers what it did then).
var giveUpHistories = storetest.HistoryConfig{WaitCleanup: remote.GiveUpBound}

// TestOpenURLs: each transport's URL options; a bad URL is an
// *InvalidError.
func TestOpenURLs(t *testing.T) {
	for _, tc := range []struct {
		tr  transport
		bad []string
		// good is a valid URL of port 1, where nothing listens: an HTTP
		// store opens without connecting, a RESP store fails to connect.
		good        string
		goodConnect bool
	}{
		{httpTransport, []string{
			"ftp://host", "http://", "http://u:p@host", "http://host?nope=1", "http://host?ca=/x",
			"https://host?ca=/does/not/exist", "http://host?timeout=-1s", "https://host?cert=/x",
		}, "http://127.0.0.1:1/prefix/?token=x&timeout=2s", false},
		{respTransport, []string{
			"redis://host", "leasehold://", "leasehold://:7071", "leasehold://u:p@host", "leasehold://host/ns",
			"leasehold://host?nope=1", "leasehold://host?conns=0", "leasehold://host?conns=65", "leasehold://host?conns=x",
			"leasehold://host?timeout=1ms", "leasehold://host?wait_chunk=2h", "leasehold://host?token=a&token=b",
			"leasehold://host?ca=/x", "leaseholds://host?ca=/does/not/exist", "leaseholds://host?cert=/x",
			"leasehold://host#frag",
		}, "leasehold://127.0.0.1:1?conns=3&idle_conns=2&timeout=2s&wait_chunk=5s&token=x", true},
	} {
		t.Run(tc.tr.name, func(t *testing.T) {
			for _, bad := range tc.bad {
				if _, err := tc.tr.open(bad); !errors.Is(err, leasehold.ErrInvalid) {
					t.Errorf("open(%q) = %v, want an *InvalidError", bad, err)
				}
			}
			s, err := tc.tr.open(tc.good)
			switch {
			case err == nil && !tc.goodConnect:
				s.Close()
			case tc.goodConnect && err != nil && !errors.Is(err, leasehold.ErrInvalid):
				// the error comes from connecting
			default:
				t.Errorf("open(%q) = %v", tc.good, err)
			}
		})
	}
}

// TestOpen: remote.Open picks the protocol by scheme.
func TestOpen(t *testing.T) {
	ts := startEngine(t, respTransport, server.EngineConfig{}, serveOptions{})
	ctx := ctxT(t)
	s, err := remote.Open(ctx, ts.url(""))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*remote.RESPStore); !ok {
		t.Errorf("Open(leasehold://) = %T", s)
	}
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "open/x", Owner: "o", TTL: time.Minute}); err != nil {
		t.Error(err)
	}
	h, err := remote.Open(ctx, "http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, ok := h.(*remote.HTTPStore); !ok {
		t.Errorf("Open(http://) = %T", h)
	}
	for _, bad := range []string{"ftp://x", "leasehold://", "::"} {
		if s, err := remote.Open(ctx, bad); err == nil || s != nil {
			t.Errorf("Open(%q) = %v, %v", bad, s, err)
		}
	}
}

// TestErrorsMapBack: the server's refusals come back as package
// leasehold's errors, with their details.
func TestErrorsMapBack(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{})
		s := ts.open(t, "")
		ctx := ctxT(t)
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "m/x", Owner: "a b", TTL: time.Minute, Data: []byte{0xff, 0}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "m/x", Owner: "b", TTL: time.Minute})
		var he *leasehold.HeldError
		if !errors.As(err, &he) || he.Owner != "a b" || he.Token != rec.Token || he.Name != "m/x" || he.Remaining <= 0 || he.Acquired.IsZero() {
			t.Errorf("held: %#v", err)
		}
		if err := s.Renew(ctx, "m/x", "b", rec.Token, time.Minute); !errors.Is(err, leasehold.ErrNotHeld) {
			t.Errorf("renew by another: %v", err)
		}
		if _, err := s.Get(ctx, "m/none"); !errors.Is(err, leasehold.ErrNotFound) {
			t.Errorf("get of none: %v", err)
		}
		// The server's own name rules come back as *InvalidError with the field.
		_, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "m/../x", Owner: "a", TTL: time.Minute})
		var ie *leasehold.InvalidError
		if !errors.As(err, &ie) || ie.Field != "name" || ie.Reason == "" {
			t.Errorf("dot-dot name: %#v", err)
		}
		if got, err := s.ForceRelease(ctx, "m/x"); err != nil || got.Token != rec.Token || got.Owner != "a b" {
			t.Errorf("force release: %+v, %v", got, err)
		}
		if _, err := s.ForceRelease(ctx, "m/x"); !errors.Is(err, leasehold.ErrNotFound) {
			t.Errorf("second force release: %v", err)
		}
		if err := s.Ready(ctx); err != nil {
			t.Errorf("ready: %v", err)
		}
		s.Close()
		if _, err := s.Get(ctx, "m/x"); !errors.Is(err, leasehold.ErrClosed) {
			t.Errorf("after close: %v", err)
		}
		if _, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: "m/x", Owner: "a", TTL: time.Minute}); !errors.Is(err, leasehold.ErrClosed) {
			t.Errorf("AcquireWait after close: %v", err)
		}
	})
}

// wireCode is how the transport carried the server's refusal in err: an
// HTTP status or a RESP error reply's first word.
func wireCode(err error) string {
	var pe *remote.ProblemError
	var re *remote.RESPError
	switch {
	case errors.As(err, &pe):
		return strconv.Itoa(pe.Status)
	case errors.As(err, &re):
		return re.Code
	}
	return ""
}

// TestAuthErrors: no token, a wrong token, a read-only token and the rate
// limit are refused with the package's errors; the token may come from
// the environment.
func TestAuthErrors(t *testing.T) {
	auth, err := server.NewAuth(server.AuthConfig{Tokens: []server.TokenConfig{
		{Identity: "reader", Token: "r", Grants: []server.Grant{{Prefix: "", Access: "read"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]struct{ unauthorized, forbidden string }{
		"http": {"401", "403"},
		"resp": {"NOAUTH", "NOPERM"},
	}
	eachTransport(t, func(t *testing.T, tr transport) {
		want := codes[tr.name]
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{Auth: auth, Limits: &server.Limits{PerSecond: 0.001, Burst: 4}})
		ctx := ctxT(t)
		req := leasehold.AcquireRequest{Name: "a/x", Owner: "o", TTL: time.Minute}
		none := ts.open(t, "")
		if _, err := none.TryAcquire(ctx, req); !errors.Is(err, remote.ErrUnauthorized) || wireCode(err) != want.unauthorized {
			t.Errorf("no token: %v (%q)", err, wireCode(err))
		}
		// RESP refuses a wrong token when it connects, HTTP at the first call.
		if wrong, err := tr.open(ts.url("?token=wrong")); err == nil {
			_, err = wrong.Get(ctx, "a/x")
			wrong.Close()
			if !errors.Is(err, remote.ErrUnauthorized) {
				t.Errorf("wrong token: %v", err)
			}
		} else if !errors.Is(err, remote.ErrUnauthorized) {
			t.Errorf("wrong token: %v", err)
		}
		reader := ts.open(t, "?token=r")
		if _, err := reader.TryAcquire(ctx, req); !errors.Is(err, remote.ErrForbidden) || wireCode(err) != want.forbidden {
			t.Errorf("reader acquires: %v (%q)", err, wireCode(err))
		}
		if _, err := reader.AcquireWait(ctx, req); !errors.Is(err, remote.ErrForbidden) {
			t.Errorf("reader waits: %v", err)
		}
		if recs, err := reader.List(ctx, ""); err != nil || len(recs) != 0 {
			t.Errorf("reader lists: %v, %v", recs, err)
		}
		t.Setenv(remote.EnvAuthToken, "r")
		env := ts.open(t, "")
		if _, err := env.Get(ctx, "a/x"); !errors.Is(err, leasehold.ErrNotFound) {
			t.Errorf("token from the environment: %v", err)
		}
		for i := 0; ; i++ {
			_, err := env.Get(ctx, "a/x")
			if errors.Is(err, remote.ErrRateLimited) {
				break
			}
			if !errors.Is(err, leasehold.ErrNotFound) || i > 10 {
				t.Fatalf("request %d over the rate limit: %v", i, err)
			}
		}
	})
}

// TestQuotaErrors: an acquire, a waiting acquire and a session open over
// the server's quotas come back as ErrQuotaExceeded on both transports.
func TestQuotaErrors(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{Quotas: &server.Quotas{Leases: 1, Sessions: 1}})
		ctx := ctxT(t)
		s := ts.open(t, "")
		if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "q/1", Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		req := leasehold.AcquireRequest{Name: "q/2", Owner: "o", TTL: time.Minute}
		if _, err := s.TryAcquire(ctx, req); !errors.Is(err, remote.ErrQuotaExceeded) {
			t.Errorf("a second lease over a quota of 1: %v, want ErrQuotaExceeded", err)
		}
		if _, err := s.AcquireWait(ctx, req); !errors.Is(err, remote.ErrQuotaExceeded) {
			t.Errorf("a second lease, waiting, over a quota of 1: %v, want ErrQuotaExceeded", err)
		}
		if _, err := s.Get(ctx, "q/2"); !errors.Is(err, leasehold.ErrNotFound) {
			t.Errorf("the refused lease: %v, want not found", err)
		}
		sess, err := tr.openSession(ctx, s, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close(ctx)
		if _, err := tr.openSession(ctx, s, time.Minute); !errors.Is(err, remote.ErrQuotaExceeded) {
			t.Errorf("a second session over a quota of 1: %v, want ErrQuotaExceeded", err)
		}
	})
}

// TestAcquireWaitFIFO: waiters are granted in arrival order, each by the
// release of the one before, with increasing tokens.
func TestAcquireWaitFIFO(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{})
		s := ts.open(t, "")
		ctx := ctxT(t)
		h, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "f", Owner: "holder", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		type grant struct {
			rec leasehold.Record
			err error
		}
		order := make(chan grant, 4)
		for i, o := range []string{"a", "b", "c", "d"} {
			go func() {
				rec, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: "f", Owner: o, TTL: time.Minute})
				order <- grant{rec, err}
			}()
			// Queue them one by one so that the arrival order is known.
			ts.waiters(t, "f", i+1)
		}
		last := h
		var got []string
		for range 4 {
			if err := s.Release(ctx, "f", last.Owner, last.Token); err != nil {
				t.Fatal(err)
			}
			g := <-order
			if g.err != nil {
				t.Fatal(g.err)
			}
			if g.rec.Token <= last.Token {
				t.Errorf("token %d after %d", g.rec.Token, last.Token)
			}
			got = append(got, g.rec.Owner)
			last = g.rec
		}
		if strings.Join(got, "") != "abcd" {
			t.Errorf("grant order %v, want a b c d", got)
		}
	})
}

// TestAcquireWaitCancel: ending the context of a waiting acquire drops the
// waiter on the server and leaves the holder alone; the wait goes on
// across RESP's chunks (each asked for again) and ends at a deadline
// shorter than one.
func TestAcquireWaitCancel(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{})
		s := ts.open(t, map[string]string{"resp": "?wait_chunk=100ms"}[tr.name])
		ctx := ctxT(t)
		h, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "c", Owner: "holder", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := s.AcquireWait(wctx, leasehold.AcquireRequest{Name: "c", Owner: "w", TTL: time.Minute})
			done <- err
		}()
		ts.waiters(t, "c", 1)
		time.Sleep(350 * time.Millisecond) // several chunks
		select {
		case err := <-done:
			t.Fatalf("AcquireWait returned while the lease was held: %v", err)
		default:
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("AcquireWait after cancel: %v", err)
		}
		ts.waiters(t, "c", 0)
		if got, err := s.Get(ctx, "c"); err != nil || got.Token != h.Token {
			t.Errorf("holder after a cancelled wait: %+v, %v", got, err)
		}
		dctx, dcancel := context.WithTimeout(ctx, 150*time.Millisecond)
		defer dcancel()
		if _, err := s.AcquireWait(dctx, leasehold.AcquireRequest{Name: "c", Owner: "w", TTL: time.Minute}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("AcquireWait past its deadline: %v", err)
		}
	})
}

// grantInFlight is a backend whose waiting acquires of owner "late" are
// granted by the engine and then held back until the server has seen the
// client go (its ctx ends), as a grant in flight when a cancel arrives is:
// the server then has a grant to answer on a connection whose client gave
// up waiting.
type grantInFlight struct {
	server.Backend
	granted chan struct{}
}

func (b grantInFlight) Acquire(ctx context.Context, req server.AcquireRequest) (leasehold.Record, error) {
	if req.Owner != "late" || req.Wait == 0 {
		return b.Backend.Acquire(ctx, req)
	}
	rec, err := b.Backend.Acquire(context.WithoutCancel(ctx), req)
	close(b.granted)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
	}
	return rec, err
}

// TestAcquireWaitCancelGrantInFlight: a waiter cancelled while its grant is
// on its way does not keep the lease: the client reads the grant that
// raced with its cancel (or finds it) and releases it. Over RESP the client
// closed its connection and lost the grant, which held the lease for its
// TTL (a minute).
func TestAcquireWaitCancelGrantInFlight(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		eng, err := server.OpenEngine(server.EngineConfig{})
		if err != nil {
			t.Fatal(err)
		}
		b := grantInFlight{Backend: eng, granted: make(chan struct{})}
		ts := startBackend(t, tr, b, serveOptions{})
		s := ts.open(t, "")
		ctx := ctxT(t)
		h, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "f", Owner: "holder", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := s.AcquireWait(wctx, leasehold.AcquireRequest{Name: "f", Owner: "late", TTL: time.Minute})
			done <- err
		}()
		ts.waiters(t, "f", 1)
		if err := s.Release(ctx, "f", "holder", h.Token); err != nil {
			t.Fatal(err)
		}
		<-b.granted
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("AcquireWait after cancel: %v", err)
		}
		servertest.WaitFor(t, "the raced grant's release", func() bool {
			_, err := s.Get(ctx, "f")
			return errors.Is(err, leasehold.ErrNotFound)
		})
	})
}

// TestSession: leases taken through a session (by TryAcquire and by a
// waiting acquire) live as long as it does, kept alive past several of
// its TTLs, and are freed when it closes; a session the server forgets is
// reported lost.
func TestSession(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{})
		s := ts.open(t, "")
		ctx := ctxT(t)
		// 2 s, kept past three of its TTLs: with 600 ms each keepalive had
		// about 400 ms to be confirmed, ten times in a row, which one stall
		// of a loaded machine could break.
		const sessTTL = 2 * time.Second
		sess := ts.openSession(t, ctx, s, sessTTL)
		if sess.TTL() != sessTTL || sess.ID() == "" {
			t.Errorf("session %q, TTL %s", sess.ID(), sess.TTL())
		}
		ss := sess.Store()
		c, _ := leasehold.New(ss, leasehold.WithOwner("sessioned"))
		l, err := c.TryAcquire(ctx, "sess/a", leasehold.TTL(time.Minute), leasehold.NoKeepalive())
		if err != nil {
			t.Fatal(err)
		}
		// A waiting acquire attaches to the session too.
		l2, err := c.Acquire(ctx, "sess/b", leasehold.TTL(time.Minute), leasehold.NoKeepalive())
		if err != nil {
			t.Fatal(err)
		}
		// The session's keepalive holds it past several session TTLs.
		time.Sleep(3 * sessTTL)
		if err := sess.Err(); err != nil {
			t.Fatalf("session lost: %v", err)
		}
		for _, l := range []*leasehold.Lease{l, l2} {
			if got, err := s.Get(ctx, l.Name()); err != nil || got.Token != l.Token() {
				t.Fatalf("session lease %s: %+v, %v", l.Name(), got, err)
			}
		}
		ss.Close() // a no-op
		if err := sess.Close(ctx); err != nil {
			t.Fatal(err)
		}
		ended(t, "session after Close", sess, 0, leasehold.ErrReleased)
		if recs, err := s.List(ctx, "sess/"); err != nil || len(recs) != 0 {
			t.Errorf("leases after the session closed: %v, %v", recs, err)
		}
		if err := sess.Close(ctx); err != nil {
			t.Errorf("second close: %v", err)
		}
		if _, err := ss.TryAcquire(ctx, leasehold.AcquireRequest{Name: "sess/c", Owner: "o", TTL: time.Minute}); !errors.Is(err, remote.ErrNoSession) {
			t.Errorf("acquire in a closed session: %v", err)
		}

		// A session the server forgets is reported lost.
		lost := ts.openSession(t, ctx, s, 300*time.Millisecond)
		if err := ts.backend().CloseSession(ctx, lost.ID()); err != nil {
			t.Fatal(err)
		}
		ended(t, "a session closed on the server", lost, 10*time.Second, leasehold.ErrLost)
		// Closing it says what ended it over RESP; HTTP's Session.Close
		// returns nil for a lost session (as documented).
		if err, want := lost.Close(ctx), map[string]error{"resp": leasehold.ErrLost}[tr.name]; !errors.Is(err, want) {
			t.Errorf("Close of a lost session = %v, want %v", err, want)
		}
	})
}

// TestWatch: watches signal releases of their name only, survive a server
// restart (signalled after it), and are closed with their context or the
// store.
func TestWatch(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{Dir: t.TempDir()}, serveOptions{})
		s := ts.open(t, "")
		ctx := ctxT(t)
		recv := func(what string, ch <-chan struct{}) {
			t.Helper()
			select {
			case _, ok := <-ch:
				if !ok {
					t.Fatalf("%s: channel closed", what)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no notification within 10s", what)
			}
		}
		quiet := func(what string, ch <-chan struct{}) {
			t.Helper()
			select {
			case <-ch:
				t.Errorf("%s: unexpected notification", what)
			case <-time.After(50 * time.Millisecond):
			}
		}
		wctx, cancel := context.WithCancel(ctx)
		var chans []<-chan struct{}
		for i := 0; i < 3; i++ {
			ch, err := s.Watch(wctx, fmt.Sprintf("wt/%d", i%2)) // two watches of wt/0
			if err != nil {
				t.Fatal(err)
			}
			chans = append(chans, ch)
		}
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "wt/0", Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		quiet("after a grant", chans[0])
		if err := s.Release(ctx, "wt/0", "o", rec.Token); err != nil {
			t.Fatal(err)
		}
		recv("first watch of wt/0", chans[0])
		recv("second watch of wt/0", chans[2])
		quiet("watch of wt/1", chans[1])

		ts.restart()
		for i, ch := range chans {
			recv(fmt.Sprintf("watch %d after a restart", i), ch)
		}
		rec, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "wt/1", Owner: "o", TTL: time.Minute})
		if err == nil {
			err = s.Release(ctx, "wt/1", "o", rec.Token)
		}
		if err != nil {
			t.Fatal(err)
		}
		recv("watch of wt/1 after the restart", chans[1])

		cancel()
		for i, ch := range chans {
			deadline := time.After(10 * time.Second)
		drain:
			for {
				select {
				case _, ok := <-ch:
					if !ok {
						break drain
					}
				case <-deadline:
					t.Fatalf("watch %d not closed after its context ended", i)
				}
			}
		}
		ch, err := s.Watch(ctx, "wt/2")
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		select {
		case _, ok := <-ch:
			if ok {
				t.Error("a value instead of close after the store closed")
			}
		case <-time.After(10 * time.Second):
			t.Error("watch not closed with the store")
		}
		if _, err := s.Watch(ctx, "wt/3"); !errors.Is(err, leasehold.ErrClosed) {
			t.Errorf("Watch after Close: %v", err)
		}
	})
}

// TestTLS: https:// and leaseholds:// with a private CA and a client
// certificate; without the certificate, with another CA, in plain text or
// checking another name, nothing is answered.
func TestTLS(t *testing.T) {
	p := servertest.NewPKI(t)
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{TLS: p.MutualTLS()})
		withCert := "?ca=" + p.CAFile + "&cert=" + p.ClientCert + "&key=" + p.ClientKey
		s := ts.open(t, withCert)
		ctx := ctxT(t)
		if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "tls/x", Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{
			ts.url("?ca=" + p.CAFile),                                                    // no client certificate
			ts.url("?cert=" + p.ClientCert + "&key=" + p.ClientKey),                      // unknown authority
			ts.url("?ca=" + p.OtherCA + "&cert=" + p.ClientCert + "&key=" + p.ClientKey), // another CA
			tr.scheme + ts.hostPort(),                                                    // plain text
			ts.url(withCert + "&server_name=other"),                                      // wrong name
		} {
			if s, err := tr.open(bad); err == nil {
				_, err = s.Get(ctx, "tls/x")
				s.Close()
				if err == nil {
					t.Errorf("open(%s) worked", bad)
				}
			}
		}
	})
}

// BenchmarkAcquireRelease: 32 goroutines (on 2 cores) each acquire and
// release distinct names through one store (over RESP pipelined on its
// shared connections) against an in-process server on the engine, durable
// (every grant group-committed with fdatasync) and NoSync.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, tr := range transports {
		for _, bc := range []struct {
			name   string
			noSync bool
		}{{"durable", false}, {"nosync", true}} {
			b.Run(tr.name+"/"+bc.name, func(b *testing.B) {
				var syncs, records atomic.Int64
				hooks := server.Hooks{Sync: func(_ time.Duration, n int) { syncs.Add(1); records.Add(int64(n)) }}
				ts := startEngine(b, tr, server.EngineConfig{Dir: b.TempDir(), NoSync: bc.noSync, Hooks: hooks}, serveOptions{})
				s := ts.open(b, "")
				ctx := context.Background()
				var next atomic.Int64
				b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					name := fmt.Sprintf("bench/%d", next.Add(1))
					for pb.Next() {
						rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "bench", TTL: time.Minute})
						if err != nil {
							b.Error(err)
							return
						}
						if err := s.Release(ctx, name, "bench", rec.Token); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
				if n := syncs.Load(); n > 0 {
					b.ReportMetric(float64(records.Load())/float64(n), "records/sync")
				}
			})
		}
	}
}

// BenchmarkHandoff measures same-name handoffs: 8 clients take turns on
// one name through the server's FIFO queue (AcquireWait), each releasing
// at once.
func BenchmarkHandoff(b *testing.B) {
	for _, tr := range transports {
		b.Run(tr.name, func(b *testing.B) {
			ts := startEngine(b, tr, server.EngineConfig{Dir: b.TempDir()}, serveOptions{})
			s := ts.open(b, "")
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			b.ResetTimer()
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx := context.Background()
					owner := fmt.Sprintf("w%d", w)
					for left.Add(-1) >= 0 {
						rec, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: "hot", Owner: owner, TTL: time.Minute})
						if err != nil {
							b.Error(err)
							return
						}
						if err := s.Release(ctx, "hot", owner, rec.Token); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handoffs/s")
		})
	}
}

// TestAcquireWaitStoreClosed: closing the store ends a wait in progress
// at once with ErrClosed, the server drops the waiter, and a release
// afterwards does not grant it (red team of issue 32: a closed HTTP
// store's long-poll went on for up to 30 s and was granted a lease that
// nobody could renew or release).
func TestAcquireWaitStoreClosed(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{})
		holderStore := ts.open(t, "")
		ctx := ctxT(t)
		h, err := holderStore.TryAcquire(ctx, leasehold.AcquireRequest{Name: "cw", Owner: "holder", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		s := ts.open(t, "")
		got := make(chan error, 1)
		go func() {
			_, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: "cw", Owner: "w", TTL: time.Minute})
			got <- err
		}()
		ts.waiters(t, "cw", 1)
		start := time.Now()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if !errors.Is(err, leasehold.ErrClosed) {
				t.Errorf("AcquireWait after Close: %v; want ErrClosed", err)
			}
			t.Logf("the wait ended %s after Close", time.Since(start).Round(time.Millisecond))
		case <-time.After(10 * time.Second):
			t.Fatal("AcquireWait still waiting 10 s after its store closed")
		}
		ts.waiters(t, "cw", 0)
		if err := holderStore.Release(ctx, "cw", "holder", h.Token); err != nil {
			t.Fatal(err)
		}
		if rec, err := holderStore.Get(ctx, "cw"); !errors.Is(err, leasehold.ErrNotFound) {
			t.Errorf("after the holder's release: %+v, %v; want the lease free (the closed store's waiter gone)", rec, err)
		}
	})
}
