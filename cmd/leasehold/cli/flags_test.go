package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold"
)

// TestFlagDidYouMean: a mistyped flag is a usage error that names the
// nearest flag of the command; a flag far from all gets no suggestion.
func TestFlagDidYouMean(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		args []string
		want string // "" for no suggestion
	}{
		{[]string{"run", "--wiat", "1s", "a", "--", "true"}, "--wait"},
		{[]string{"run", "--no-wiat", "a", "--", "true"}, "--no-wait"},
		{[]string{"run", "--permit", "2", "a", "--", "true"}, "--permits"},
		{[]string{"hold", "--tll", "1s", "a"}, "--ttl"},
		{[]string{"status", "--jsno"}, "--json"},
		{[]string{"release", "--tokn", "1", "a"}, "--token"},
		{[]string{"run", "--zzzzzzzz", "a", "--", "true"}, ""},
	}
	for _, c := range cases {
		r := h.run(c.args...)
		if r.code != ExitUsage {
			t.Errorf("%q: exit %d, want %d", c.args, r.code, ExitUsage)
		}
		got := strings.Contains(r.stderr, "Did you mean")
		if c.want == "" && got {
			t.Errorf("%q: unexpected suggestion:\n%s", c.args, r.stderr)
		}
		if c.want != "" && !strings.Contains(r.stderr, "Did you mean "+c.want+"?") {
			t.Errorf("%q: no suggestion of %s:\n%s", c.args, c.want, r.stderr)
		}
	}
}

// TestFlagShortForms: -n, -w and -E on run mean --no-wait, --wait and
// --conflict-exit-code.
func TestFlagShortForms(t *testing.T) {
	h := newHarness(t)
	h.hold("a", "other")
	if r := h.run("run", "--store", h.url, "-n", "--verbose", "a", "--", "true"); r.code != ExitNotAcquired || !strings.Contains(r.stderr, "held by other") {
		t.Errorf("run -n --verbose: exit %d, want %d; stderr %q", r.code, ExitNotAcquired, r.stderr)
	}
	if r := h.run("run", "--store", h.url, "-n", "-E", "0", "--verbose", "a", "--", "true"); r.code != 0 || !strings.Contains(r.stderr, "held by other") {
		t.Errorf("run -n -E 0 --verbose: exit %d, want 0; stderr %q", r.code, r.stderr)
	}
	if r := h.run("run", "--store", h.url, "-w", "100ms", "-E", "12", "a", "--", "true"); r.code != 12 || !strings.Contains(r.stderr, "gave up waiting") {
		t.Errorf("run -w 100ms -E 12: exit %d, want 12; stderr %q", r.code, r.stderr)
	}
	for _, bad := range []string{"-1", "256"} {
		if r := h.run("run", "--store", h.url, "-n", "-E", bad, "b", "--", "true"); r.code != ExitUsage {
			t.Errorf("run -E %s: exit %d, want %d", bad, r.code, ExitUsage)
		}
	}
	if l, err := h.store().Get(t.Context(), "b"); err == nil {
		t.Errorf("a refused -E took the lease: %+v", l)
	}
}

// TestGraceDerivedFromTTL: without --grace, every TTL from the 10ms
// minimum up gets a grace inside its renewal window, and the usual
// TTL/3 where that fits.
func TestGraceDerivedFromTTL(t *testing.T) {
	for _, ttl := range []time.Duration{leasehold.MinTTL, 11 * time.Millisecond, 16 * time.Millisecond, 50 * time.Millisecond, minCommandTTL, time.Second, leasehold.DefaultTTL} {
		g, w := defaultGrace(ttl), leasehold.RenewalWindow(ttl)
		if g <= 0 || g >= w {
			t.Errorf("ttl %s: grace %s not in (0, %s)", ttl, g, w)
		}
	}
	if g := defaultGrace(30 * time.Second); g != 10*time.Second {
		t.Errorf("ttl 30s: grace %s, want 10s", g)
	}
	// The command no longer fails on a --grace the user never gave: at the
	// minimum TTL, run and elect get past their checks to the store (an
	// opener that fails on purpose shows they did, whatever the machine's
	// speed).
	h := newHarness(t)
	reached := errors.New("the store was reached")
	h.open = func(context.Context, string) (leasehold.Store, error) { return nil, reached }
	for _, verb := range []string{"run", "elect"} {
		r := h.run(verb, "--store", h.url, "--ttl", minCommandTTL.String(), "a", "--", "true")
		if r.code != ExitInternal || !strings.Contains(r.stderr, reached.Error()) {
			t.Errorf("%s --ttl %s: exit %d, want %d from the opener; stderr %q", verb, minCommandTTL, r.code, ExitInternal, r.stderr)
		}
	}
	// And the command runs there. It must start within the TTL (the
	// keeper does not start it past the lease's deadline), which a starved
	// machine may not manage (CI, load 30 on 2 cores: "the lease's
	// deadline passed before the command started", or no renewal confirmed
	// in time): exit 76 then, the documented answer to a lease not kept.
	// Never a usage error, nor anything about --grace.
	h = newHarness(t)
	r := h.run("run", "--store", h.url, "--ttl", minCommandTTL.String(), "a", "--", "true")
	switch {
	case r.code == ExitLost && !strings.Contains(r.stderr, "--grace"):
		t.Logf("run --ttl %s lost the lease on this machine (exit 76): %s", minCommandTTL, r.stderr)
	case r.code != 0:
		t.Errorf("run --ttl %s: exit %d; stderr %q", minCommandTTL, r.code, r.stderr)
	}
	// Shorter than a command can use: a usage error naming the minimum,
	// for run and elect (it used to "lose" a lease whose command never
	// ran, exit 76); hold has no command and keeps the store's range.
	for _, verb := range []string{"run", "elect"} {
		r := h.run(verb, "--store", h.url, "--ttl", "10ms", "b", "--", "sleep", "5")
		if r.code != ExitUsage || !strings.Contains(r.stderr, "minimum of 500ms") {
			t.Errorf("%s --ttl 10ms: exit %d, want %d naming the minimum; stderr %q", verb, r.code, ExitUsage, r.stderr)
		}
	}
	if rec, err := h.store().Get(context.Background(), "b"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("after the refused --ttl: Get(b) = %+v, %v; want ErrNotFound", rec, err)
	}
}

// TestHelpBareParents: a parent command without a subcommand prints its
// help on stderr and exits 64, as the bare root does.
func TestHelpBareParents(t *testing.T) {
	h := newHarness(t)
	for _, args := range [][]string{{}, {"store"}} {
		r := h.run(args...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, "Usage:") || r.stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s", args, r.code, r.stdout, r.stderr)
		}
	}
}

// TestHelpListsSchemes: the top-level help names every store scheme and
// the new commands; no help text mentions "source document".
func TestHelpListsSchemes(t *testing.T) {
	h := newHarness(t)
	r := h.run("--help")
	for _, want := range []string{"sqlite://", "memory://", "postgres://", "redis://", "rediss://", "dynamodb://",
		"etcd://", "etcds://", "http://", "https://", "leasehold://", "leaseholds://", "hold", "release", "force-release"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("leasehold --help lacks %q", want)
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		text := c.Short + c.Long + c.Example
		c.Flags().VisitAll(func(f *pflag.Flag) { text += f.Usage })
		if strings.Contains(strings.ToLower(text), "source document") {
			t.Errorf("%s --help mentions a source document", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&env{}))
}

// TestWaitFlockHabits (issue 29, item 1): -w takes plain seconds as
// flock(1) does ("2", "1.5") besides Go durations, -w 0 makes one attempt
// (it waited forever), and -n (or -w 0) is quiet on a conflict unless
// --verbose; hold takes the same flags. Bad values are usage errors that
// take nothing. The side-by-side comparison with flock(1) itself is
// TestFlockSideBySide in cmd/leasehold.
func TestWaitFlockHabits(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"2", 2 * time.Second}, {"1.5", 1500 * time.Millisecond}, {".25", 250 * time.Millisecond},
		{"0", 0}, {"0.0", 0}, {"2s", 2 * time.Second}, {"1m30s", 90 * time.Second}, {"-1", -time.Second},
		// strtod's numbers, as flock(1) reads them (issue 29's red team, #9).
		{"1e0", time.Second}, {"1E-1", 100 * time.Millisecond}, {"1e3", 1000 * time.Second},
		{"0x1", time.Second}, {"0x10", 16 * time.Second}, {"0x1p-1", 500 * time.Millisecond}, {"00", 0},
	} {
		if d, err := parseWait(c.in); err != nil || d != c.want {
			t.Errorf("parseWait(%q) = %v, %v; want %v", c.in, d, err, c.want)
		}
	}
	for _, bad := range []string{"", ".", "1.2.3", "2x", "1e", "nan", "inf", "0x", "0xg", "99999999999", "1e10", "soon", "1_0"} {
		if d, err := parseWait(bad); err == nil {
			t.Errorf("parseWait(%q) = %v, want an error", bad, d)
		}
	}

	h := newHarness(t)
	h.hold("a", "other")
	if r := h.run("run", "--store", h.url, "-w", "0.3", "-E", "12", "a", "--", "true"); r.code != 12 || !strings.Contains(r.stderr, "gave up waiting for a after 300ms") {
		t.Errorf("run -w 0.3: exit %d, want 12; stderr %q", r.code, r.stderr)
	}
	for _, args := range [][]string{
		{"run", "-w", "0"}, {"run", "-n"}, {"run", "-n", "-E", "0"}, {"run", "--wait", "0s"},
		{"hold", "-n"}, {"hold", "-w", "0"},
	} {
		a := append(append(args[:len(args):len(args)], "--store", h.url, "a"), "--", "true")
		if args[0] == "hold" {
			a = a[:len(a)-2]
		}
		want := ExitNotAcquired
		if len(args) == 4 {
			want = 0
		}
		r := h.run(a...)
		if r.code != want || r.stderr != "" {
			t.Errorf("%q: exit %d, want %d, and stderr %q, want none", a, r.code, want, r.stderr)
		}
		v := h.run(append([]string{args[0], "--verbose"}, a[1:]...)...)
		if v.code != want || !strings.Contains(v.stderr, "a is held by other (token 1") {
			t.Errorf("%q --verbose: exit %d, want %d; stderr %q", a, v.code, want, v.stderr)
		}
	}
	for _, bad := range []string{"-1", "-0.5", "inf", "2x", "99999999999"} {
		if r := h.run("run", "--store", h.url, "-w", bad, "b", "--", "true"); r.code != ExitUsage || !strings.Contains(r.stderr, "wait") {
			t.Errorf("run -w %s: exit %d, want %d; stderr %q", bad, r.code, ExitUsage, r.stderr)
		}
	}
	if _, err := h.store().Get(t.Context(), "b"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("a refused -w took the lease b: %v", err)
	}
}
