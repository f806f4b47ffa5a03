package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The manual pages in docs/man are written from the commands' help by
// internal/genman; TestManPagesCheckedIn fails when they differ from what
// it writes now.
//go:generate go run ./internal/genman ../../../docs/man

// ManPage is one manual page: its file name (leasehold-run.1) and its
// text (roff, man macros).
type ManPage struct {
	File string
	Text []byte
}

// ManPages returns a manual page (section 1) for leasehold and for each of
// its commands, made from the same texts as their --help: the short line,
// the long help, the flags with their defaults, the examples. Help texts
// that depend on the environment (the default store's path under $HOME)
// are written as the environment has them: the generator clears HOME and
// XDG_DATA_HOME so that they read "~/.local/share/...".
func ManPages() []ManPage {
	root := newRoot(&env{})
	root.InitDefaultVersionFlag()
	var pages []ManPage
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.InitDefaultHelpFlag()
		pages = append(pages, ManPage{File: manName(c) + ".1", Text: manPage(c)})
		for _, sub := range manChildren(c) {
			walk(sub)
		}
	}
	walk(root)
	return pages
}

// WriteManPages writes ManPages into dir (created if missing) and removes
// the other *.1 files there, so that a command removed loses its page.
func WriteManPages(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pages := ManPages()
	keep := map[string]bool{}
	for _, p := range pages {
		keep[p.File] = true
		if err := os.WriteFile(filepath.Join(dir, p.File), p.Text, 0o644); err != nil {
			return err
		}
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.1"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if !keep[filepath.Base(f)] {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// manChildren are the commands of c that get pages: every command --help
// lists (not the help command, not hidden ones).
func manChildren(c *cobra.Command) []*cobra.Command {
	var subs []*cobra.Command
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() && s.Name() != "help" {
			subs = append(subs, s)
		}
	}
	slices.SortFunc(subs, func(a, b *cobra.Command) int { return strings.Compare(a.Name(), b.Name()) })
	return subs
}

// manName is the page's name: the command's path with dashes
// (leasehold-store-init).
func manName(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "-")
}

func manPage(c *cobra.Command) []byte {
	var b strings.Builder
	name := manName(c)
	b.WriteString(`.\" Written by "go generate ./cmd/leasehold/cli" from the command's help text; do not edit.` + "\n")
	fmt.Fprintf(&b, ".TH %s 1 \"\" \"leasehold\" \"leasehold manual\"\n", roffQuote(strings.ToUpper(name)))
	// Left-aligned, no hyphenation: flags and names stay whole.
	b.WriteString(".ad l\n.nh\n")
	b.WriteString(".SH NAME\n")
	fmt.Fprintf(&b, "%s \\- %s\n", roffEscape(name), roffEscape(c.Short))

	b.WriteString(".SH SYNOPSIS\n.nf\n")
	if c.Runnable() {
		use := strings.TrimPrefix(c.UseLine(), c.CommandPath())
		fmt.Fprintf(&b, "\\fB%s\\fR%s\n", roffEscape(c.CommandPath()), roffEscape(use))
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(&b, "\\fB%s\\fR COMMAND\n", roffEscape(c.CommandPath()))
	}
	b.WriteString(".fi\n")

	b.WriteString(".SH DESCRIPTION\n")
	long := c.Long
	if long == "" {
		long = c.Short + "."
	}
	b.WriteString(roffText(long))

	if subs := manChildren(c); len(subs) > 0 {
		b.WriteString(".SH COMMANDS\n")
		for _, s := range subs {
			fmt.Fprintf(&b, ".TP\n\\fB%s\\fR(1)\n%s\n", roffEscape(manName(s)), roffEscape(s.Short))
		}
	}
	if fs := c.NonInheritedFlags(); fs.HasAvailableFlags() {
		b.WriteString(".SH OPTIONS\n")
		b.WriteString(roffFlags(fs))
	}
	if fs := c.InheritedFlags(); fs.HasAvailableFlags() {
		b.WriteString(".SH OPTIONS OF ALL COMMANDS\n")
		b.WriteString(roffFlags(fs))
	}
	if c.Example != "" {
		b.WriteString(".SH EXAMPLES\n")
		b.WriteString(roffPre(strings.Split(strings.Trim(c.Example, "\n"), "\n")))
	}

	b.WriteString(".SH SEE ALSO\n")
	var see []string
	if c.HasParent() {
		see = append(see, "leasehold")
		if c.Parent().HasParent() {
			see = append(see, manName(c.Parent()))
		}
	}
	for _, s := range manChildren(c) {
		see = append(see, manName(s))
	}
	for i, s := range see {
		sep := ",\n"
		if i == len(see)-1 {
			sep = "\n"
		}
		fmt.Fprintf(&b, "\\fB%s\\fR(1)%s", roffEscape(s), sep)
	}
	if !c.HasParent() {
		b.WriteString(".PP\nThe documentation in docs/ of the source tree, and the README.\n")
	}
	return []byte(b.String())
}

// roffFlags writes each flag of fs as a tagged paragraph: the flag as
// --help names it (-w, --wait duration), then its usage and default,
// taken from the same rendering --help uses.
func roffFlags(fs *pflag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *pflag.Flag) {
		one := pflag.NewFlagSet("", pflag.ContinueOnError)
		one.AddFlag(f)
		line := strings.TrimRight(one.FlagUsagesWrapped(0), "\n")
		if line == "" {
			return // hidden
		}
		tag, usage, _ := strings.Cut(strings.TrimLeft(line, " "), "   ")
		tag = strings.TrimSpace(tag)
		var tagRoff []string
		for i, word := range strings.Split(tag, " ") {
			switch {
			case strings.HasPrefix(word, "-"):
				w := strings.TrimSuffix(word, ",")
				r := `\fB` + roffEscape(w) + `\fR`
				if w != word {
					r += ","
				}
				tagRoff = append(tagRoff, r)
			case i > 0:
				tagRoff = append(tagRoff, `\fI`+roffEscape(word)+`\fR`)
			}
		}
		usage = strings.Join(strings.Fields(usage), " ")
		fmt.Fprintf(&b, ".TP\n%s\n%s\n", strings.Join(tagRoff, " "), roffLine(usage))
	})
	return b.String()
}

// roffText turns a help text into paragraphs: blocks separated by blank
// lines; a block whose lines all start at the margin is filled by man, a
// block with an indented line (a table, a list, a command) is kept as
// written.
func roffText(s string) string {
	var b strings.Builder
	var block []string
	flush := func() {
		if len(block) == 0 {
			return
		}
		indented := slices.ContainsFunc(block, func(l string) bool {
			return strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t")
		})
		if indented {
			b.WriteString(roffPre(block))
		} else {
			b.WriteString(".PP\n")
			for _, l := range block {
				b.WriteString(roffLine(strings.TrimSpace(l)) + "\n")
			}
		}
		block = block[:0]
	}
	for _, l := range strings.Split(strings.Trim(s, "\n"), "\n") {
		if strings.TrimSpace(l) == "" {
			flush()
			continue
		}
		block = append(block, strings.TrimRight(l, " \t"))
	}
	flush()
	return b.String()
}

// roffPre keeps lines as written, with their indentation: no filling,
// no adjusting.
func roffPre(lines []string) string {
	var b strings.Builder
	b.WriteString(".PP\n.nf\n")
	for _, l := range lines {
		l = strings.TrimRight(strings.ReplaceAll(l, "\t", "        "), " ")
		b.WriteString(roffLine(l) + "\n")
	}
	b.WriteString(".fi\n")
	return b.String()
}

// roffLine escapes one line of text, and keeps a line that starts with a
// dot or a quote from being read as a request.
func roffLine(s string) string {
	s = roffEscape(s)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// roffEscape escapes roff's escape character and makes every hyphen a
// minus sign, so that flags and names copied from the page work.
func roffEscape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	return strings.ReplaceAll(s, "-", `\-`)
}

func roffQuote(s string) string {
	return `"` + strings.ReplaceAll(roffEscape(s), `"`, `\(dq`) + `"`
}
