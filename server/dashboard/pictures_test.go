package dashboard_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// overflowJS lists what overflows horizontally: the page wider than the
// window, an element of a panel (the header and main's sections) outside
// its panel or wider than its parent, and an element whose content is
// wider than its box (it scrolls or clips sideways). Elements of 1 px or
// less (the visually hidden ones) and their contents are skipped.
const overflowJS = `(() => {
	const bad = [];
	const de = document.documentElement;
	if (de.scrollWidth > window.innerWidth) bad.push('the page is ' + de.scrollWidth + ' px wide in a window of ' + window.innerWidth);
	const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
		(typeof e.className === 'string' && e.className ? '.' + e.className.trim().split(/\s+/).join('.') : '') +
		(e.closest('[data-name]') ? ' in ' + JSON.stringify(e.closest('[data-name]').dataset.name) : '');
	for (const panel of document.querySelectorAll('header.top, main > section')) {
		const pr = panel.getBoundingClientRect();
		const tiny = new Set();
		for (const e of panel.querySelectorAll('*')) {
			const r = e.getBoundingClientRect();
			if (r.width === 0 && r.height === 0) continue;
			if (r.width <= 1 || r.height <= 1 || tiny.has(e.parentElement)) { tiny.add(e); continue; }
			if (r.left < pr.left - 1 || r.right > pr.right + 1)
				bad.push(name(e) + ' spans ' + Math.round(r.left) + '..' + Math.round(r.right) + ', outside its panel ' + Math.round(pr.left) + '..' + Math.round(pr.right));
			const p = e.parentElement.getBoundingClientRect();
			if (r.width > p.width + 1) bad.push(name(e) + ' is ' + Math.round(r.width) + ' px wide in a parent of ' + Math.round(p.width));
			if (!(e instanceof SVGElement) && e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1)
				bad.push(name(e) + ' has content ' + e.scrollWidth + ' px wide in a box of ' + e.clientWidth);
		}
	}
	return bad;
})()`

// picturesJS reads the timeline and the charts as the page draws them.
const picturesJS = `(() => {
	const lanes = {};
	for (const li of document.querySelectorAll('#timeline .tl-lane')) {
		lanes[li.dataset.name] = {
			Label: li.querySelector('.tl-name').textContent,
			Holds: Array.from(li.querySelectorAll('.tl-hold')).map(g => g.dataset.owner + '#' + g.dataset.token + (g.classList.contains('live') ? ' live' : '')),
			Waits: Array.from(li.querySelectorAll('.tl-wait')).map(r => r.dataset.owner),
			Forced: li.querySelectorAll('.tl-forced').length,
		};
	}
	const bars = Array.from(document.querySelectorAll('#chart-grants .bar'));
	return {
		Lanes: lanes,
		Bars: bars.length,
		Grants: bars.reduce((n, b) => n + Number(b.dataset.count), 0),
		Handoffs: document.querySelectorAll('#chart-handoff .dot').length,
		WaiterLines: document.querySelectorAll('#chart-waiters .line').length,
		WaitersMax: (document.querySelector('#chart-waiters .line') || {dataset: {}}).dataset.max || '',
		Waiters: document.querySelector('#chart-waiters .value').textContent,
	};
})()`

type lane struct {
	Label        string
	Holds, Waits []string
	Forced       int
}

type pictures struct {
	Lanes       map[string]lane
	Bars        int
	Grants      int
	Handoffs    int
	WaiterLines int
	WaitersMax  string
	Waiters     string
}

// Names and data with characters a reader could not see: they are shown
// with visible escapes, and the markup in the data stays text.
const (
	oddName = "pic/odd\u202Eevil"
	oddData = "line1\nline2\t<img src=x onerror=\"window.__xss=1\">\u200b\\"
	// An owner as programs make them: long, without a space to break at.
	longOwner = "worker-7f3a9c1e.build-cluster.internal.example.com:pid=48213"
)

// TestDashboardPictures: after a grant, a wait, a handoff, a force release
// and two more grants, the page draws the timeline (a lane per name with
// its holds, waits and force releases) and the charts (grants per second,
// queued waiters, handoff latency), and shows the data column with visible
// escapes, at 1280 px and at a phone's 390 px, with nothing overflowing
// sideways. The screenshots are kept (see checkScreenshot).
func TestDashboardPictures(t *testing.T) {
	enginetest.Chromium(t)
	ctx := context.Background()
	be := openEngine(t)
	ts := serveDashboard(t, be, server.HandlerOptions{})

	alice := acquire(t, be, "pic/a", "alice")
	granted := make(chan leasehold.Record, 1)
	failed := make(chan error, 1)
	go func() {
		rec, err := be.Acquire(ctx, server.AcquireRequest{
			AcquireRequest: leasehold.AcquireRequest{Name: "pic/a", Owner: "bob", TTL: 10 * time.Minute},
			Wait:           time.Hour,
		})
		if err != nil {
			failed <- err
			return
		}
		granted <- rec
	}()
	for deadline := time.Now().Add(timeout); len(be.Waiters("pic/a")) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("bob never queued on pic/a")
		}
	}
	if err := be.Release(ctx, "pic/a", "alice", alice.Token); err != nil {
		t.Fatal(err)
	}
	var bob leasehold.Record
	select {
	case bob = <-granted:
	case err := <-failed:
		t.Fatalf("bob's acquire: %v", err)
	case <-time.After(timeout):
		t.Fatal("bob was never granted pic/a")
	}
	if _, err := be.ForceRelease(ctx, "pic/a"); err != nil {
		t.Fatal(err)
	}
	odd, err := be.Acquire(ctx, server.AcquireRequest{AcquireRequest: leasehold.AcquireRequest{
		Name: oddName, Owner: "eve\u200b", TTL: 10 * time.Minute, Data: []byte(oddData)}})
	if err != nil {
		t.Fatal(err)
	}
	carol, err := be.Acquire(ctx, server.AcquireRequest{AcquireRequest: leasehold.AcquireRequest{
		Name: "pic/b", Owner: longOwner, TTL: 10 * time.Minute, Data: []byte{0, 1, 0xff, 'A'}}})
	if err != nil {
		t.Fatal(err)
	}

	wantLanes := map[string]lane{
		"pic/a": {Label: "pic/a", Holds: []string{fmt.Sprintf("alice#%d", alice.Token), fmt.Sprintf("bob#%d", bob.Token)}, Waits: []string{"bob"}, Forced: 1},
		oddName: {Label: `pic/odd\u202Eevil`, Holds: []string{fmt.Sprintf("eve\u200b#%d live", odd.Token)}},
		"pic/b": {Label: "pic/b", Holds: []string{fmt.Sprintf("%s#%d live", longOwner, carol.Token)}},
	}
	for _, size := range []struct{ w, h int }{{1280, 800}, {390, 844}} {
		t.Run(fmt.Sprint(size.w), func(t *testing.T) {
			b := newBrowserAt(t, size.w, size.h)
			// Headless Chromium makes no window narrower than 500 px: the
			// phone's width comes from device-metrics emulation.
			b.do("setting the viewport", chromedp.EmulateViewport(int64(size.w), int64(size.h)))
			b.do("loading the dashboard", chromedp.Navigate(ts.URL+"/dashboard/"))
			if w, err := eval[int](b, `window.innerWidth`); err != nil || w > size.w || w < size.w-20 {
				t.Fatalf("the window is %d px wide (%v), want about %d", w, err, size.w)
			}
			b.eventually("the timeline and the charts", func() string {
				p, err := eval[pictures](b, picturesJS)
				if err != nil {
					return err.Error()
				}
				for name, want := range wantLanes {
					got, ok := p.Lanes[name]
					if !ok {
						return fmt.Sprintf("no lane for %q (lanes %+v)", name, p.Lanes)
					}
					if got.Label != want.Label || !slices.Equal(got.Holds, want.Holds) || !slices.Equal(got.Waits, want.Waits) || got.Forced != want.Forced {
						return fmt.Sprintf("lane %q = %+v, want %+v", name, got, want)
					}
				}
				if len(p.Lanes) != len(wantLanes) {
					return fmt.Sprintf("%d lanes, want %d", len(p.Lanes), len(wantLanes))
				}
				// bob's wait is the one step of the waiters' line.
				// The server started seconds ago: bars from its start only.
				if p.Bars < 1 || p.Bars > 30 || p.Grants != 4 || p.Handoffs != 1 || p.WaiterLines != 1 || p.WaitersMax != "1" || p.Waiters != "0 now" {
					return fmt.Sprintf("charts: %d bars counting %d grants, %d handoff dots, %d waiter lines (max %q, %q); "+
						"want 1 to 30 bars counting 4 grants, 1 dot, 1 line (max 1, \"0 now\")", p.Bars, p.Grants, p.Handoffs, p.WaiterLines, p.WaitersMax, p.Waiters)
				}
				return ""
			})
			b.eventually("the data column with visible escapes", func() string {
				cells, err := eval[map[string]string](b, `Object.fromEntries(Array.from(document.querySelectorAll('#lease-rows tr')).map(tr =>
					[tr.dataset.name, tr.querySelector('.lease-name').textContent + ' | ' + tr.querySelector('.owner').textContent + ' | ' +
					tr.querySelector('td.data').textContent + ' | ' + tr.querySelector('td.data').title]))`)
				if err != nil {
					return err.Error()
				}
				want := map[string]string{
					// The cell shows 48 characters, its tooltip all.
					oddName: `pic/odd\u202Eevil | eve\u200B | line1\nline2\t<img src=x onerror="window.__xss=1… | ` +
						`line1\nline2\t<img src=x onerror="window.__xss=1">\u200B\\`,
					"pic/b": `pic/b | ` + longOwner + ` | 4 B: \x00\x01\xFFA | \x00\x01\xFFA`,
				}
				for name, w := range want {
					if cells[name] != w {
						return fmt.Sprintf("row %q shows %q, want %q", name, cells[name], w)
					}
				}
				return ""
			})
			if n, err := eval[int](b, `document.querySelectorAll('img').length + (window.__xss ? 1000 : 0)`); err != nil || n != 0 {
				t.Errorf("the data's markup became elements or ran (%d, %v)", n, err)
			}
			bad, err := eval[[]string](b, overflowJS)
			if err != nil {
				t.Fatal(err)
			}
			if len(bad) > 0 {
				t.Errorf("overflows at %d px:\n%s", size.w, strings.Join(bad, "\n"))
			}
			shot, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
			if err != nil {
				t.Fatalf("screenshot: %v", err)
			}
			checkScreenshot(t, shot, size.w)
		})
	}
}

// TestDashboardBusyName: grants made while the page is open reach the
// pictures through the event stream, beyond the events the server keeps
// (256), and a name with more holds than half its lane's pixels is drawn
// with one bar per pixel column.
func TestDashboardBusyName(t *testing.T) {
	enginetest.Chromium(t)
	ctx := context.Background()
	be := openEngine(t)
	ts := serveDashboard(t, be, server.HandlerOptions{})

	b := newBrowserAt(t, 390, 844)
	b.do("setting the viewport", chromedp.EmulateViewport(390, 844))
	b.do("loading the dashboard", chromedp.Navigate(ts.URL+"/dashboard/"))
	b.eventually("a live stream", func() string {
		if c := b.text("conn-text"); c != "live" {
			return fmt.Sprintf("connection %q", c)
		}
		return ""
	})
	const n = 500 // more than the lane's pixels at 390 px
	for i := 0; i < n; i++ {
		rec := acquire(t, be, "busy/job", "worker")
		if err := be.Release(ctx, "busy/job", "worker", rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	type busy struct{ Grants, Holds, Width int }
	b.eventually("every grant counted, the holds thinned", func() string {
		got, err := eval[busy](b, `({
			Grants: Array.from(document.querySelectorAll('#chart-grants .bar')).reduce((n, b) => n + Number(b.dataset.count), 0),
			Holds: document.querySelectorAll('#timeline .tl-lane[data-name="busy/job"] .tl-hold').length,
			Width: Math.round((document.querySelector('#timeline .tl-svg') || {getBoundingClientRect: () => ({width: 0})}).getBoundingClientRect().width),
		})`)
		if err != nil {
			return err.Error()
		}
		if got.Grants != n || got.Holds < 1 || got.Holds > got.Width {
			return fmt.Sprintf("%d grants counted, %d holds drawn in a lane of %d px; want %d grants and at most one hold per pixel column", got.Grants, got.Holds, got.Width, n)
		}
		return ""
	})
}
