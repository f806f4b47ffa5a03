package dashboard_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestDashboardUnknownStart: a hold whose grant the server's recent events
// no longer include (it keeps the latest 256) is not drawn from the
// window's start (issue 27: "worker-5 held it with token 42, before
// 07:30:13 to 07:31:31" for a grant at 07:30:52, a 0.3 s hold drawn as
// 57.6 s): a released one is a stub that says its start is unknown; a live
// one starts at its lease's acquired time.
func TestDashboardUnknownStart(t *testing.T) {
	enginetest.Chromium(t)
	ctx := context.Background()
	be := openEngine(t)
	ts := serveDashboard(t, be, server.HandlerOptions{})

	lost := acquire(t, be, "unk/lost", "w1")
	live := acquire(t, be, "unk/live", "w2")
	time.Sleep(1500 * time.Millisecond) // the live grant's time differs from its renewal's
	for range 150 {                     // 300 events: the two grants drop out of the server's 256
		rec := acquire(t, be, "unk/noise", "n")
		if err := be.Release(ctx, "unk/noise", "n", rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	if err := be.Release(ctx, "unk/lost", "w1", lost.Token); err != nil {
		t.Fatal(err)
	}
	if err := be.Renew(ctx, "unk/live", "w2", live.Token, 10*time.Minute); err != nil {
		t.Fatal(err)
	}

	b := newBrowserAt(t, 1280, 800)
	b.do("loading the dashboard", chromedp.Navigate(ts.URL+"/dashboard/"))
	type hold struct {
		Class, Title string
		Width        float64
	}
	b.eventually("the two lanes", func() string {
		got, err := eval[map[string][]hold](b, `(() => {
			const out = {};
			for (const li of document.querySelectorAll('#timeline .tl-lane')) {
				out[li.dataset.name] = Array.from(li.querySelectorAll('.tl-hold')).map(g => ({
					Class: g.getAttribute('class'), Title: g.querySelector('title').textContent,
					Width: Number(g.querySelector('rect').getAttribute('width')),
				}));
			}
			return out;
		})()`)
		if err != nil {
			return err.Error()
		}
		l, v := got["unk/lost"], got["unk/live"]
		if len(l) != 1 || len(v) != 1 {
			return fmt.Sprintf("holds drawn: unk/lost %+v, unk/live %+v; want one each", l, v)
		}
		if !strings.Contains(l[0].Class, "start-unknown") || !strings.Contains(l[0].Title, "when it began is not known") ||
			strings.Contains(l[0].Title, "before") || l[0].Width > 10 {
			return fmt.Sprintf("unk/lost's hold (grant no longer among the events) is drawn %+v; want a stub that says its start is unknown", l[0])
		}
		if strings.Contains(v[0].Class, "start-unknown") || !strings.Contains(v[0].Class, "live") ||
			strings.Contains(v[0].Title, "before") || !strings.Contains(v[0].Title, "to now") {
			return fmt.Sprintf("unk/live's hold is drawn %+v; want it live, from its lease's acquired time", v[0])
		}
		return ""
	})
}
