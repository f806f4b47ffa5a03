package dashboard_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestDashboardLookAlikeNames: a store may hold names the server's API
// would refuse (made by the Go library straight on the store): "x/admin"
// and "x/admin" + U+200B, the second held by an owner ending in a bidi
// override. The list, the button's label, the confirm dialog of a force
// release and the error that follows (the server refuses such a name) show
// the invisible characters as escapes, so the operator can tell which
// lease is meant; the force release frees that one and only that one.
func TestDashboardLookAlikeNames(t *testing.T) {
	enginetest.Chromium(t)
	be := openProxy(t)
	ts := serveDashboard(t, be, server.HandlerOptions{})
	const plain, odd = "x/admin", "x/admin\u200b"
	acquire(t, be, plain, "alice")
	oddRec := acquire(t, be, odd, "alice\u202e")

	b := newBrowser(t)
	b.do("loading the dashboard", chromedp.Navigate(ts.URL+"/dashboard/"))
	// Each row as the page shows it: name button, holder, button label.
	const shownJS = `Array.from(document.querySelectorAll('#lease-rows tr')).map(tr =>
		[tr.querySelector('.lease-name').textContent, tr.children[1].textContent,
		 tr.querySelector('button.danger').getAttribute('aria-label')].join(' | '))`
	b.eventually("both leases listed, the look-alike escaped", func() string {
		got, err := eval[[]string](b, shownJS)
		if err != nil {
			return err.Error()
		}
		want := map[string]bool{
			`x/admin | alice | Force release x/admin`:                   true,
			`x/admin\u200B | alice\u202E | Force release x/admin\u200B`: true,
		}
		if len(got) != 2 || !want[got[0]] || !want[got[1]] || got[0] == got[1] {
			return fmt.Sprintf("rows %q, want %q", got, slices.Collect(maps.Keys(want)))
		}
		return ""
	})

	// Force release of the look-alike: the dialog (accepted by the
	// browser helper) names it with its escape.
	b.do("clicking Force release on the look-alike", chromedp.Evaluate[chromedp.Void](
		`Array.from(document.querySelectorAll('#lease-rows tr')).find(tr => tr.dataset.name === 'x/admin\u200b').querySelector('button.danger').click()`))
	// Operations on names a store already holds accept them (only creating
	// one is refused: server.CheckExistingName), so the force release frees
	// the look-alike, and only it.
	b.eventually("the look-alike freed, the plain name still held", func() string {
		if _, err := be.Get(context.Background(), odd); err == nil {
			return fmt.Sprintf("%q still held (the page says %q)", odd, b.text("error"))
		}
		if _, err := be.Get(context.Background(), plain); err != nil {
			return fmt.Sprintf("%q was freed: %v", plain, err)
		}
		return ""
	})
	ds := b.dialogMessages()
	wantDialog := fmt.Sprintf(`Force release "x/admin\u200B", held by alice\u202E (token %d)?`, oddRec.Token)
	if len(ds) != 1 || !strings.HasPrefix(ds[0], wantDialog) {
		t.Errorf("confirmation dialogs %q: want one starting %q", ds, wantDialog)
	}
	for _, d := range ds {
		if strings.ContainsAny(d, "\u200b\u202e") {
			t.Errorf("confirmation dialog %q holds the invisible characters themselves", d)
		}
	}
}

// TestDashboardLookAlikeLetters (issue 26): names that differ only in a
// letter of another script (Cyrillic а for Latin a), in composed against
// decomposed form (é against e + U+0301), or in a trailing space were
// shown identically although the docs promise that two names never look
// alike. Every row shows its own escapes, and no two rows look the same.
func TestDashboardLookAlikeLetters(t *testing.T) {
	enginetest.Chromium(t)
	be := openProxy(t)
	ts := serveDashboard(t, be, server.HandlerOptions{})
	names := map[string]string{ // name: how the page shows it
		"x/cafe":          `x/cafe`,
		"x/caf\u00e9":     `x/caf\xE9`,
		"x/cafe\u0301":    `x/cafe\u0301`,
		"x/c\u0430fe":     `x/c\u0430fe`,
		"x/cafe ":         `x/cafe\x20`,
		"x/two  spaces":   `x/two\x20\x20spaces`,
		"x/one space":     `x/one space`,
		"x/\uff43afe":     `x/\uFF43afe`,
		"x/back\\slash":   `x/back\\slash`,
		"x/admin\u200b":   `x/admin\u200B`,
		"x/caf\u00e9/own": `x/caf\xE9/own`,
	}
	for n := range names {
		acquire(t, be, n, "o-"+n)
	}
	b := newBrowser(t)
	b.do("loading the dashboard", chromedp.Navigate(ts.URL+"/dashboard/"))
	b.eventually("every look-alike shown with its own escapes", func() string {
		got, err := eval[map[string]string](b, `Object.fromEntries(Array.from(document.querySelectorAll('#lease-rows tr')).map(tr =>
			[tr.dataset.name, tr.querySelector('.lease-name').textContent + ' | ' + tr.children[1].textContent]))`)
		if err != nil {
			return err.Error()
		}
		seen := map[string]string{}
		for n, shown := range names {
			want := shown + " | o-" + shown
			if got[n] != want {
				return fmt.Sprintf("%q is shown %q, want %q", n, got[n], want)
			}
			if other, dup := seen[got[n]]; dup {
				return fmt.Sprintf("%q and %q look the same: %q", n, other, got[n])
			}
			seen[got[n]] = n
		}
		return ""
	})
}
