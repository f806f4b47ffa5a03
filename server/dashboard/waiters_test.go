package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/servertest"
)

// TestDashboardPermitWaiters (issue 27, item 3): with 2 of 2 permits of a
// semaphore held and 2 more acquires waiting (POST
// /v1/semaphores/pool/acquire with wait_ms, what the clients send), each
// permit's row shows 2 waiters; it showed 0, the waits being invisible
// to the server.
func TestDashboardPermitWaiters(t *testing.T) {
	enginetest.Chromium(t)
	be := openEngine(t)
	ts := serveDashboard(t, be, server.HandlerOptions{})
	post := func(ctx context.Context, owner string, wait time.Duration) {
		body := fmt.Sprintf(`{"owner":%q,"permits":2,"ttl_ms":600000,"wait_ms":%d}`, owner, wait.Milliseconds())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/semaphores/pool/acquire", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}
	post(context.Background(), "h1", 0)
	post(context.Background(), "h2", 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, o := range []string{"w1", "w2"} {
		go post(ctx, o, time.Minute)
	}
	servertest.WaitFor(t, "two waiters", func() bool { return be.Stats().Waiters == 2 })

	b := newBrowserAt(t, 1280, 800)
	b.do("loading the dashboard", chromedp.Navigate(ts.URL+"/dashboard/"))
	b.eventually("each permit's row shows 2 waiters", func() string {
		got, err := eval[map[string]string](b, `(() => {
			const out = {};
			for (const tr of document.querySelectorAll('tbody tr[data-name]')) {
				out[tr.dataset.name] = tr.querySelector('td.waiters').textContent;
			}
			out.stat = document.getElementById('stat-waiters').textContent;
			return out;
		})()`)
		if err != nil {
			return err.Error()
		}
		if got["pool/permit/0"] != "2" || got["pool/permit/1"] != "2" || got["stat"] != "2" {
			return fmt.Sprintf("rows and stats show %v; want 2 waiters on both permits and in the stats", got)
		}
		return ""
	})
}

// TestDashboardUnknownWaitStart (issue 27, item 2's remnant): the page
// draws only the waiting it knows of. The waiters chart starts at the
// server's start, not at the window's (it drew a line from 5 minutes
// before a server started seconds ago); a wait whose queued event is no
// longer among the server's recent events (it keeps 256) is a stub at its
// end that says its start is unknown, like a hold's.
func TestDashboardUnknownWaitStart(t *testing.T) {
	enginetest.Chromium(t)
	ctx := context.Background()
	be := openEngine(t)
	ts := serveDashboard(t, be, server.HandlerOptions{})

	h := acquire(t, be, "uw/x", "holder")
	granted := make(chan error, 1)
	go func() {
		_, err := be.Acquire(ctx, server.AcquireRequest{Wait: time.Minute,
			AcquireRequest: leasehold.AcquireRequest{Name: "uw/x", Owner: "waiter", TTL: 10 * time.Minute}})
		granted <- err
	}()
	servertest.WaitFor(t, "the waiter to queue", func() bool { return len(be.Waiters("uw/x")) == 1 })
	for range 150 { // 300 events: the queued event drops out of the server's 256
		rec := acquire(t, be, "uw/noise", "n")
		if err := be.Release(ctx, "uw/noise", "n", rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	if err := be.Release(ctx, "uw/x", "holder", h.Token); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatal(err)
	}

	b := newBrowserAt(t, 1280, 800)
	b.do("loading the dashboard", chromedp.Navigate(ts.URL+"/dashboard/"))
	type pic struct {
		Waits []struct{ Class, Title string }
		Path  string
		Width float64
	}
	b.eventually("the wait and the waiters line", func() string {
		got, err := eval[pic](b, `(() => {
			const lane = document.querySelector('#timeline .tl-lane[data-name="uw/x"]');
			const line = document.querySelector('#chart-waiters .line');
			const svg = document.querySelector('#chart-waiters svg');
			return {
				Waits: lane ? Array.from(lane.querySelectorAll('.tl-wait')).map(r => ({
					Class: r.getAttribute('class'), Title: r.querySelector('title').textContent})) : [],
				Path: line ? line.getAttribute('d') : '',
				Width: svg ? Number(svg.getAttribute('width')) : 0,
			};
		})()`)
		if err != nil {
			return err.Error()
		}
		if len(got.Waits) != 1 || !strings.Contains(got.Waits[0].Class, "start-unknown") ||
			!strings.Contains(got.Waits[0].Title, "when it began is not known") {
			return fmt.Sprintf("uw/x's waits drawn: %+v; want one stub that says its start is unknown", got.Waits)
		}
		x0, ok := firstX(got.Path)
		if !ok || x0 < got.Width/2 {
			return fmt.Sprintf("the waiters line %.40q... (chart %.0f px wide) starts at x %.0f; want it to start at the server's start, seconds before now (right half)", got.Path, got.Width, x0)
		}
		return ""
	})
}

// firstX is the x of a path's first M.
func firstX(d string) (float64, bool) {
	f := strings.Fields(strings.TrimPrefix(d, "M"))
	if len(f) == 0 {
		return 0, false
	}
	x, err := strconv.ParseFloat(f[0], 64)
	return x, err == nil
}
