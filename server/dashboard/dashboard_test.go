package dashboard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/server/dashboard"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// timeout bounds each wait: the test machines are small and busy, so the
// test asserts on what the page shows, not on how fast it shows it.
const timeout = 60 * time.Second

// browser is one headless Chromium tab with its page's dialogs accepted
// and its uncaught exceptions collected.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu         sync.Mutex
	dialogs    []string
	exceptions []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	return newBrowserAt(t, 1280, 800)
}

// newBrowserAt opens a tab in a window of width × height CSS pixels
// (Chromium's --window-size).
func newBrowserAt(t *testing.T, width, height int) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(enginetest.Chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests run as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(width, height),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	// The first action starts the browser and opens the tab, both bound to
	// its context: that must be ctx itself, not one with a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", enginetest.Chromium(t), err)
	}
	b := &browser{t: t, ctx: ctx}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, ev.Message)
			b.mu.Unlock()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			msg := ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil && ev.ExceptionDetails.Exception.Description != "" {
				msg = ev.ExceptionDetails.Exception.Description
			}
			b.mu.Lock()
			b.exceptions = append(b.exceptions, msg)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.exceptions {
			t.Errorf("uncaught exception in the page: %s", e)
		}
	})
	return b
}

func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func eval[T any](b *browser, js string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](js))
}

// eventually retries check until it returns "" (success) or the timeout
// passes; it then fails with check's last complaint and what the page shows.
func (b *browser) eventually(what string, check func() string) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := check()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			text, _ := eval[string](b, `document.body.innerText`)
			b.t.Fatalf("%s: %s\n--- the page shows:\n%s", what, msg, text)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *browser) dialogMessages() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.dialogs)
}

// row is a lease as the table shows it.
type row struct {
	Name, Holder, Token, Age, Remaining, Waiters, Session string
}

const rowsJS = `Array.from(document.querySelectorAll('#lease-rows tr')).map(tr => {
	const c = Array.from(tr.children).map(td => td.textContent.trim());
	return {Name: tr.dataset.name, Holder: c[1], Token: c[2], Age: c[3], Remaining: c[4], Waiters: c[5], Session: c[6]};
})`

func (b *browser) rows() map[string]row {
	rs, err := eval[[]row](b, rowsJS)
	if err != nil {
		b.t.Logf("reading the table: %v", err)
		return nil
	}
	m := map[string]row{}
	for _, r := range rs {
		m[r.Name] = r
	}
	return m
}

func (b *browser) text(id string) string {
	s, _ := eval[string](b, fmt.Sprintf(`(document.getElementById(%q) || {}).textContent || ''`, id))
	return strings.TrimSpace(s)
}

func acquire(t *testing.T, be server.Backend, name, owner string) leasehold.Record {
	t.Helper()
	rec, err := be.Acquire(context.Background(), server.AcquireRequest{
		AcquireRequest: leasehold.AcquireRequest{Name: name, Owner: owner, TTL: 10 * time.Minute},
	})
	if err != nil {
		t.Fatalf("acquire %s as %s: %v", name, owner, err)
	}
	return rec
}

// queue starts a waiting acquire of name and returns once it is queued.
func queue(t *testing.T, be server.Backend, name, owner string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	n := len(be.Waiters(name))
	go func() {
		defer close(done)
		_, _ = be.Acquire(ctx, server.AcquireRequest{
			AcquireRequest: leasehold.AcquireRequest{Name: name, Owner: owner, TTL: time.Minute},
			Wait:           time.Hour,
		})
	}()
	deadline := time.Now().Add(timeout)
	for len(be.Waiters(name)) <= n {
		if time.Now().After(deadline) {
			t.Fatalf("%s never queued on %s", owner, name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func openEngine(t *testing.T) *server.Engine {
	t.Helper()
	e, err := server.OpenEngine(server.EngineConfig{Dir: t.TempDir()})
	if err != nil {
		// The page does not care whether the engine keeps a log.
		t.Logf("durable engine: %v; using an in-memory one", err)
		if e, err = server.OpenEngine(server.EngineConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// serveDashboard serves the API of be with opts and the dashboard, until
// the test ends.
func serveDashboard(t *testing.T, be server.Backend, opts server.HandlerOptions) *httptest.Server {
	opts.Dashboard = dashboard.Handler()
	ts := httptest.NewServer(server.NewHandler(be, opts))
	t.Cleanup(ts.Close)
	return ts
}

func openProxy(t *testing.T) server.Backend {
	t.Helper()
	p := server.NewProxy(memory.New(), server.ProxyConfig{})
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestDashboardInBrowser runs the page against the native engine and
// against a proxy in front of a store.
func TestDashboardInBrowser(t *testing.T) {
	enginetest.Chromium(t)
	t.Run("engine", func(t *testing.T) { testDashboard(t, openEngine(t)) })
	t.Run("proxy", func(t *testing.T) { testDashboard(t, openProxy(t)) })
}

func testDashboard(t *testing.T, be server.Backend) {
	ts := serveDashboard(t, be, server.HandlerOptions{})

	a := acquire(t, be, "jobs/nightly", "alice")
	bob := acquire(t, be, "jobs/hourly", "bob")
	queue(t, be, "jobs/nightly", "carol")
	queue(t, be, "jobs/nightly", "dave")

	b := newBrowser(t)
	b.do("loading the dashboard", chromedp.Navigate(ts.URL+"/dashboard/"))
	// Marks this page load: a reload would lose it.
	if _, err := eval[chromedp.Void](b, `window.__sameLoad = true`); err != nil {
		t.Fatal(err)
	}

	b.eventually("both leases listed with holders and tokens", func() string {
		rs := b.rows()
		for _, want := range []leasehold.Record{a, bob} {
			r, ok := rs[want.Name]
			if !ok {
				return fmt.Sprintf("no row for %s (rows: %v)", want.Name, rs)
			}
			if r.Holder != want.Owner || r.Token != fmt.Sprint(want.Token) {
				return fmt.Sprintf("row %+v, want holder %s token %d", r, want.Owner, want.Token)
			}
		}
		if r := rs["jobs/nightly"]; r.Waiters != "2" {
			return fmt.Sprintf("jobs/nightly shows %q waiters, want 2", r.Waiters)
		}
		if r := rs["jobs/hourly"]; r.Waiters != "0" {
			return fmt.Sprintf("jobs/hourly shows %q waiters, want 0", r.Waiters)
		}
		return ""
	})
	b.eventually("the header shows the stats and a live stream", func() string {
		durable := map[bool]string{true: "yes", false: "no"}[be.Stats().Durable]
		got := []string{b.text("stat-held"), b.text("stat-waiters"), b.text("stat-durable"), b.text("conn-text")}
		if want := []string{"2", "2", durable, "live"}; !slices.Equal(got, want) {
			return fmt.Sprintf("held, waiters, durable, connection = %q, want %q", got, want)
		}
		return ""
	})
	rs := b.rows()
	if r := rs["jobs/nightly"]; r.Age == "–" || r.Remaining == "–" || r.Remaining == "expiring" {
		t.Errorf("jobs/nightly: age %q, remaining %q: want durations", r.Age, r.Remaining)
	}

	// The waiters of a lease, in grant order.
	b.do("choosing jobs/nightly", chromedp.Click(chromedp.CSS(`#lease-rows tr[data-name="jobs/nightly"] .lease-name`)))
	b.eventually("the waiters of jobs/nightly in order", func() string {
		owners, err := eval[[]string](b, `Array.from(document.querySelectorAll('#detail-waiters li .owner')).map(e => e.textContent)`)
		if err != nil {
			return err.Error()
		}
		if !slices.Equal(owners, []string{"carol", "dave"}) {
			return fmt.Sprintf("waiters %q, want [carol dave]", owners)
		}
		if name := b.text("detail-name"); name != "jobs/nightly" {
			return fmt.Sprintf("detail of %q", name)
		}
		return ""
	})

	// A grant made after the page loaded appears without a reload.
	erin := acquire(t, be, "jobs/weekly", "erin")
	b.eventually("jobs/weekly appears live", func() string {
		r, ok := b.rows()["jobs/weekly"]
		if !ok || r.Holder != "erin" || r.Token != fmt.Sprint(erin.Token) {
			return fmt.Sprintf("row %+v, want erin with token %d", r, erin.Token)
		}
		return ""
	})

	// Force release asks first, names the lease and its holder, and then
	// frees the lease.
	b.do("clicking Force release on jobs/hourly",
		chromedp.Click(chromedp.CSS(`#lease-rows tr[data-name="jobs/hourly"] button[aria-label="Force release jobs/hourly"]`)))
	b.eventually("the lease is force-released", func() string {
		if _, err := be.Get(context.Background(), "jobs/hourly"); !errors.Is(err, leasehold.ErrNotFound) {
			return fmt.Sprintf("the backend still has jobs/hourly (Get: %v)", err)
		}
		if _, ok := b.rows()["jobs/hourly"]; ok {
			return "the row of jobs/hourly is still shown"
		}
		return ""
	})
	ds := b.dialogMessages()
	if len(ds) != 1 || !strings.Contains(ds[0], "jobs/hourly") || !strings.Contains(ds[0], "bob") {
		t.Errorf("confirmation dialogs %q: want one naming jobs/hourly and bob", ds)
	}
	b.eventually("the recent events, newest first", func() string {
		evs, err := eval[[]string](b, `Array.from(document.querySelectorAll('#event-list li')).map(li => li.dataset.type + ' ' + li.querySelector('.what').textContent)`)
		if err != nil {
			return err.Error()
		}
		if len(evs) < 2 || evs[0] != "forced jobs/hourly" || evs[1] != "granted jobs/weekly" {
			return fmt.Sprintf("events %q, want forced jobs/hourly, then granted jobs/weekly first", evs)
		}
		if !slices.Contains(evs, "queued jobs/nightly") {
			return fmt.Sprintf("events %q lack the queued waiters", evs)
		}
		return ""
	})
	if same, err := eval[bool](b, `window.__sameLoad === true`); err != nil || !same {
		t.Errorf("the page was reloaded (%v)", err)
	}

	shot, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	checkScreenshot(t, shot, 800)
}

// TestDashboardWithAuth: the page asks for a token on 401, uses it for the
// API and the event stream (under a prefix the token may read), and shows
// the problem detail of a refused force release.
func TestDashboardWithAuth(t *testing.T) {
	be := openEngine(t)
	auth, err := server.NewAuth(server.AuthConfig{Tokens: []server.TokenConfig{
		{Identity: "viewer", Token: "read-only-token", Grants: []server.Grant{{Prefix: "svc/", Access: "read"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ts := serveDashboard(t, be, server.HandlerOptions{Auth: auth})
	acquire(t, be, "svc/leader", "node-1")
	acquire(t, be, "jobs/secret", "someone")

	b := newBrowser(t)
	b.do("loading the dashboard", chromedp.Navigate(ts.URL+"/dashboard/"))
	b.eventually("the token form", func() string {
		if ok, _ := eval[bool](b, `!document.getElementById('auth').hidden`); !ok {
			return "the token form is hidden"
		}
		return ""
	})
	b.do("entering the token",
		chromedp.SendKeys(chromedp.ID("auth-token"), "read-only-token"),
		chromedp.Click(chromedp.CSS(`#auth button[type=submit]`)))
	// The token may read svc/ only: listing everything is refused, and
	// the page says to enter a prefix.
	b.eventually("the refusal to list every name", func() string {
		if msg := b.text("error"); !strings.Contains(msg, "Enter a prefix") {
			return fmt.Sprintf("error line %q", msg)
		}
		return ""
	})
	b.do("entering the prefix", chromedp.SendKeys(chromedp.ID("prefix"), "svc/"))
	b.eventually("the lease, read with the token, and a live stream", func() string {
		rs := b.rows()
		if r := rs["svc/leader"]; r.Holder != "node-1" || len(rs) != 1 {
			return fmt.Sprintf("rows %+v, want svc/leader held by node-1 alone", rs)
		}
		if c := b.text("conn-text"); c != "live" {
			return fmt.Sprintf("connection %q, want live", c)
		}
		return ""
	})
	if stored, _ := eval[string](b, `sessionStorage.getItem('leasehold.token')`); stored != "read-only-token" {
		t.Errorf("sessionStorage holds %q", stored)
	}
	b.do("clicking Force release", chromedp.Click(chromedp.CSS(`#lease-rows tr[data-name="svc/leader"] button.danger`)))
	b.eventually("the refusal shown", func() string {
		msg := b.text("error")
		if !strings.Contains(msg, "403") || !strings.Contains(msg, "svc/leader") {
			return fmt.Sprintf("error line %q, want the 403 and its detail", msg)
		}
		return ""
	})
	if _, err := be.Get(context.Background(), "svc/leader"); err != nil {
		t.Errorf("the lease is gone after a refused force release: %v", err)
	}
}

// checkScreenshot checks that shot is a PNG of a drawn page (not blank), at
// least minWidth pixels wide, and keeps it in a temporary directory and in
// LEASEHOLD_SCREENSHOT_DIR.
func checkScreenshot(t *testing.T, shot []byte, minWidth int) {
	t.Helper()
	for _, dir := range []string{t.TempDir(), os.Getenv("LEASEHOLD_SCREENSHOT_DIR")} {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, "dashboard-"+filepath.Base(t.Name())+".png")
		if err := os.WriteFile(p, shot, 0o644); err != nil {
			t.Errorf("writing the screenshot: %v", err)
		} else {
			t.Logf("screenshot: %s", p)
		}
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	bounds := img.Bounds()
	if bounds.Dx() < minWidth || bounds.Dy() < 400 || bounds.Dx() > 10000 || bounds.Dy() > 20000 {
		t.Errorf("screenshot size %v", bounds.Size())
	}
	colours, drawn := distinctColours(img)
	total := bounds.Dx() * bounds.Dy()
	if colours < 50 {
		t.Errorf("screenshot has %d distinct colours: blank?", colours)
	}
	if drawn*100 < total*2 {
		t.Errorf("only %d of %d pixels differ from the background", drawn, total)
	}
	t.Logf("screenshot %v, %d colours, %.1f%% drawn", bounds.Size(), colours, 100*float64(drawn)/float64(total))
}

// distinctColours counts the colours of img and the pixels unlike its most
// common colour (the background).
func distinctColours(img image.Image) (colours, drawn int) {
	counts := map[[4]uint32]int{}
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b, a := img.At(x, y).RGBA()
			counts[[4]uint32{r, g, b, a}]++
		}
	}
	most := 0
	for _, n := range counts {
		most = max(most, n)
	}
	return len(counts), bounds.Dx()*bounds.Dy() - most
}
