package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// manDir is docs/man of the checkout, where the pages are checked in.
const manDir = "../../../docs/man"

// manPagesAsGenerated returns ManPages as the generator writes them: with
// HOME and XDG_DATA_HOME cleared.
func manPagesAsGenerated(t *testing.T) []ManPage {
	t.Setenv("HOME", "")
	t.Setenv("XDG_DATA_HOME", "")
	return ManPages()
}

// TestManPagesCheckedIn: docs/man holds exactly the pages the help texts
// make now (no page missing, none left over, none different), so a help
// text changed without "go generate ./cmd/leasehold/cli" fails here.
func TestManPagesCheckedIn(t *testing.T) {
	pages := manPagesAsGenerated(t)
	files, err := filepath.Glob(filepath.Join(manDir, "*.1"))
	if err != nil {
		t.Fatal(err)
	}
	var have, want []string
	for _, f := range files {
		have = append(have, filepath.Base(f))
	}
	const fix = "run: go generate ./cmd/leasehold/cli"
	for _, p := range pages {
		want = append(want, p.File)
		old, err := os.ReadFile(filepath.Join(manDir, p.File))
		if err != nil {
			t.Errorf("docs/man/%s: %v (%s)", p.File, err, fix)
			continue
		}
		if !bytes.Equal(old, p.Text) {
			t.Errorf("docs/man/%s differs from the help text (%s); first difference:\n%s", p.File, fix, firstDiff(old, p.Text))
		}
	}
	for _, h := range have {
		if !slices.Contains(want, h) {
			t.Errorf("docs/man/%s is the page of no command (%s)", h, fix)
		}
	}
	// One page per command --help lists, and the root's.
	for _, name := range []string{"leasehold.1", "leasehold-run.1", "leasehold-store-init.1", "leasehold-completion.1", "leasehold-serve.1"} {
		if !slices.Contains(want, name) {
			t.Errorf("no page %s among %q", name, want)
		}
	}
	if slices.Contains(want, "leasehold-help.1") {
		t.Errorf("a page for the help command: %q", want)
	}
}

// firstDiff shows the first line where a and b differ.
func firstDiff(a, b []byte) string {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "  line " + strconv.Itoa(i+1) + " checked in: " + x + "\n  line " + strconv.Itoa(i+1) + " generated:  " + y
		}
	}
	return "  (none)"
}

// TestManPageContent: a page carries its command's short line, long help,
// every flag with its default, the examples, and escapes what roff would
// read as requests or escapes.
func TestManPageContent(t *testing.T) {
	var run []byte
	for _, p := range manPagesAsGenerated(t) {
		if p.File == "leasehold-run.1" {
			run = p.Text
		}
	}
	s := string(run)
	for _, want := range []string{
		".TH \"LEASEHOLD\\-RUN\" 1",
		"leasehold\\-run \\- Run a command while holding a lease\n",
		"\\fBleasehold run\\fR [flags] NAME \\-\\- CMD [ARGS...]\n",
		".SH OPTIONS\n",
		"\\fB\\-w\\fR, \\fB\\-\\-wait\\fR \\fIseconds\\fR\n",
		"\\fB\\-\\-ttl\\fR \\fIduration\\fR\n",
		"(default 15s)",
		".SH OPTIONS OF ALL COMMANDS\n",
		"\\fB\\-\\-connect\\-timeout\\fR",
		".SH EXAMPLES\n",
		"\\fBleasehold\\fR(1)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("leasehold-run.1 lacks %q", want)
		}
	}

	got := roffText("first line\n.starts with a dot\n'and a quote, a \\ and --flag\n\n  kept   as\n  written\n")
	want := ".PP\nfirst line\n\\&.starts with a dot\n\\&'and a quote, a \\e and \\-\\-flag\n.PP\n.nf\n  kept   as\n  written\n.fi\n"
	if got != want {
		t.Errorf("roffText:\n%s\nwant:\n%s", got, want)
	}
}

// TestManPagesRender: man formats every checked-in page without a
// warning, and the page shows its name line.
func TestManPagesRender(t *testing.T) {
	man, err := exec.LookPath("man")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("man is not installed (CI: scripts/engines.sh installs man-db)")
		}
		t.Skip("man is not installed")
	}
	for _, p := range manPagesAsGenerated(t) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, man, "--warnings", "-l", filepath.Join(manDir, p.File))
		cmd.Env = append(os.Environ(), "MANWIDTH=80", "MANPAGER=cat", "PAGER=cat", "LANG=C.UTF-8")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		cancel()
		name := strings.TrimSuffix(p.File, ".1")
		if err != nil || stderr.Len() > 0 {
			t.Errorf("man -l %s: %v\n%s", p.File, err, stderr.String())
			continue
		}
		plain := stripOverstrike(string(out))
		if !strings.Contains(plain, "NAME\n       "+name+" - ") || !strings.Contains(plain, "SEE ALSO") {
			t.Errorf("man -l %s shows no NAME line:\n%s", p.File, plain)
		}
	}
}

// stripOverstrike removes the backspace overstrikes (bold, underline) of
// man's output to a pipe.
func stripOverstrike(s string) string {
	r := []rune(s)
	var out []rune
	for i := 0; i < len(r); i++ {
		if i+1 < len(r) && r[i+1] == '\b' {
			i++
			continue
		}
		out = append(out, r[i])
	}
	return string(out)
}
