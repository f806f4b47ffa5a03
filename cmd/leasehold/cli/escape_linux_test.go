//go:build linux

package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasehold/leasehold/testrig/proctest"
)

// Names and owners with a right-to-left override (U+202E) and a
// zero-width space (U+200B): printed raw, they reorder or hide the text around them.
const (
	evilName  = "job\u202Eevil"
	evilOwner = "ops\u202Eroot\u200B"
)

// checkEscaped fails unless text shows name (and owner, if not "") escaped
// as status does, and carries neither raw.
func checkEscaped(t *testing.T, what, text string, withOwner bool) {
	t.Helper()
	if strings.ContainsRune(text, '\u202E') || strings.ContainsRune(text, '\u200B') {
		t.Errorf("%s: a raw U+202E or U+200B in %q", what, text)
	}
	if !strings.Contains(text, visible(evilName)) {
		t.Errorf("%s: %q lacks the escaped name %q", what, text, visible(evilName))
	}
	if withOwner && !strings.Contains(text, visible(evilOwner)) {
		t.Errorf("%s: %q lacks the escaped owner %q", what, text, visible(evilOwner))
	}
}

// TestEscapedNamesAndOwners (issue 29 red team): force-release's y/N
// prompt, its refusal without --yes, release's not-held message and the
// hold line escape a name and an owner as status does (\u202E, \u200B),
// instead of printing them raw.
func TestEscapedNamesAndOwners(t *testing.T) {
	h := newHarness(t)
	h.hold(evilName, evilOwner)

	// force-release on a terminal: the prompt, declined.
	master, slave := openTestPTY(t)
	var out proctest.Buffer
	e := &env{stdin: slave, stdout: &out, stderr: slave, open: h.open, openExisting: h.openExisting}
	done := make(chan int, 1)
	go func() { done <- e.main(context.Background(), []string{"force-release", "--store", h.url, evilName}) }()
	var prompt string
	for i := 0; i < 600 && !strings.Contains(prompt, "[y/N]"); i++ {
		time.Sleep(100 * time.Millisecond)
		prompt = master.text()
	}
	if !strings.Contains(prompt, "[y/N]") {
		t.Fatalf("no prompt on the terminal: %q", prompt)
	}
	checkEscaped(t, "force-release prompt", prompt, true)
	master.type_("n\n")
	select {
	case code := <-done:
		if code != ExitDeclined {
			t.Errorf("declined force-release: exit %d, want %d; terminal %q", code, ExitDeclined, master.text())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("force-release did not end after n")
	}

	// Without a terminal and without --yes: refused, the name escaped.
	r := h.run("force-release", "--store", h.url, evilName)
	if r.code != ExitUsage {
		t.Errorf("force-release without --yes: exit %d, stderr %q", r.code, r.stderr)
	}
	checkEscaped(t, "force-release without --yes", r.stderr, false)

	// release with another token: not held by that holder.
	r = h.run("release", "--store", h.url, "--owner", evilOwner, "--token", "99", evilName)
	if r.code != ExitLost {
		t.Errorf("release, wrong token: exit %d, stderr %q", r.code, r.stderr)
	}
	checkEscaped(t, "release, not held", r.stderr, true)

	// force-release --yes: the report of what it freed.
	r = h.run("force-release", "--yes", "--store", h.url, evilName)
	if r.code != 0 {
		t.Errorf("force-release --yes: exit %d, stderr %q", r.code, r.stderr)
	}
	checkEscaped(t, "force-release --yes", r.stderr, true)

	// The hold line.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var hout, herr proctest.Buffer
	he := &env{stdout: &hout, stderr: &herr, open: h.open, openExisting: h.openExisting}
	hdone := make(chan int, 1)
	go func() {
		hdone <- he.main(ctx, []string{"hold", "--store", h.url, "--owner", evilOwner, "--ttl", "1m", evilName})
	}()
	for i := 0; i < 600 && !strings.Contains(hout.String(), "holding "); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	checkEscaped(t, "hold line", hout.String(), true)
	cancel()
	<-hdone
}

// testPTY is the master side of a pseudo-terminal: what is written to the
// slave side is read into out.
type testPTY struct {
	f   *os.File
	mu  sync.Mutex
	out strings.Builder
}

func (p *testPTY) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *testPTY) type_(s string) {
	if _, err := p.f.WriteString(s); err != nil {
		panic(err)
	}
}

// openTestPTY opens a pseudo-terminal (Linux /dev/ptmx); it skips the test
// where there is none.
func openTestPTY(t *testing.T) (*testPTY, *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPTY{f: m}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := m.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		s.Close()
		m.Close()
	})
	return p, s
}
