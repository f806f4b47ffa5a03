package dashboard_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestDashboardGrantsSinceStart (issue 27, #6): the grants chart draws
// only what the page knows of. On a server started seconds ago, after 200
// grants (400 events: the server keeps 256) it drew 30 bars of 10 s, 25 of
// them minutes before the server started, and averaged the grants it had
// over 5 minutes ("0.43/s average, 128 in all"). Now no bar begins before
// the server's start, the average is over the span covered, and the
// caption says how many grants in what span, and that the server has
// dropped older events.
func TestDashboardGrantsSinceStart(t *testing.T) {
	enginetest.Chromium(t)
	ctx := context.Background()
	before := time.Now()
	be := openEngine(t)
	ts := serveDashboard(t, be, server.HandlerOptions{})
	const n = 200
	for range n {
		rec := acquire(t, be, "gs/x", "w")
		if err := be.Release(ctx, "gs/x", "w", rec.Token); err != nil {
			t.Fatal(err)
		}
	}

	b := newBrowserAt(t, 1280, 800)
	b.do("loading the dashboard", chromedp.Navigate(ts.URL+"/dashboard/"))
	type chart struct {
		Froms   []float64
		Counts  []int
		From    string
		Total   string
		Caption string
	}
	b.eventually("the grants chart since the server's start", func() string {
		got, err := eval[chart](b, `(() => {
			const bars = Array.from(document.querySelectorAll('#chart-grants .bar'));
			const svg = document.querySelector('#chart-grants svg');
			return {
				Froms: bars.map(r => Number(r.dataset.from)),
				Counts: bars.map(r => Number(r.dataset.count)),
				From: svg ? svg.dataset.from || '' : '',
				Total: svg ? svg.dataset.total || '' : '',
				Caption: document.querySelector('#chart-grants .value').textContent,
			};
		})()`)
		if err != nil {
			return err.Error()
		}
		elapsed := time.Since(before)
		// Bars of 10 s since the server's start: at most one per 10 s
		// elapsed, and one more for the partial first.
		if most := int(elapsed/(10*time.Second)) + 2; len(got.Froms) == 0 || len(got.Froms) > most {
			return fmt.Sprintf("%d bars drawn %.1f s after the server started; want 1 to %d", len(got.Froms), elapsed.Seconds(), most)
		}
		for _, f := range got.Froms {
			if !(f >= float64(before.UnixMilli())) {
				return fmt.Sprintf("a bar begins at %v, before the server started (%v)", f, before.UnixMilli())
			}
		}
		total := 0
		for _, c := range got.Counts {
			total += c
		}
		if total == 0 || total >= n || got.Total != strconv.Itoa(total) {
			return fmt.Sprintf("bars count %d grants (the chart says %q); want some of the %d, fewer than all (the server keeps 256 events)", total, got.Total, n)
		}
		if !strings.Contains(got.Caption, fmt.Sprintf(": %d grants in the last ", total)) ||
			!strings.Contains(got.Caption, "the server has dropped older ones") {
			return fmt.Sprintf("caption %q; want it to say %d grants in what span, and that the server dropped older events", got.Caption, total)
		}
		// The average is over the span covered, which is at most the time
		// since the server started.
		avg, err := strconv.ParseFloat(strings.TrimSuffix(strings.Fields(got.Caption)[0], "/s"), 64)
		if err != nil {
			return fmt.Sprintf("caption %q: %v", got.Caption, err)
		}
		if want := float64(total) / (time.Since(before).Seconds() + 1); avg < want*0.99 {
			return fmt.Sprintf("caption %q: average %.2f/s, want at least %.2f/s (%d grants in less than %.1f s)", got.Caption, avg, want, total, time.Since(before).Seconds())
		}
		return ""
	})
}
