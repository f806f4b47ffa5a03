//go:build unix

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// tool returns the path of the program name, or skips the test when it is
// missing; in CI (CI=true), where scripts/engines.sh installs it, a
// missing program fails the test instead.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed (CI: scripts/engines.sh installs it)", name)
	}
	t.Skipf("%s is not installed", name)
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// completionScript writes "leasehold completion SHELL" to a file and
// returns its path.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, bin, "completion", shell)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 || len(out) < 1000 {
		t.Fatalf("completion %s: %v, %d bytes, stderr %q", shell, err, len(out), stderr.String())
	}
	p := filepath.Join(t.TempDir(), "leasehold."+shell)
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCompletionScriptsParse: each shell's script is written and its shell
// parses it without running it.
func TestCompletionScriptsParse(t *testing.T) {
	for _, c := range []struct{ shell, flag string }{
		{"bash", "-n"}, {"zsh", "-n"}, {"fish", "--no-execute"},
	} {
		t.Run(c.shell, func(t *testing.T) {
			sh := tool(t, c.shell)
			script := completionScript(t, c.shell)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if out, err := exec.CommandContext(ctx, sh, c.flag, script).CombinedOutput(); err != nil || len(out) > 0 {
				t.Fatalf("%s %s: %v\n%s", c.shell, c.flag, err, out)
			}
		})
	}
}

// TestCompletionBadShell: no shell, two, or an unknown one is a usage
// error that prints no script.
func TestCompletionBadShell(t *testing.T) {
	for _, args := range [][]string{{"completion"}, {"completion", "bash", "zsh"}, {"completion", "tcsh"}} {
		cmd := exec.Command(bin, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if exitCode(err) != 64 || len(out) != 0 || !strings.Contains(stderr.String(), "bash") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, exitCode(err), out, stderr.String())
		}
	}
}

// completionCases are lines typed before Tab and what must (want) and
// must not (not) be offered. The working directory holds a file named
// afile, which a lease name or a duration must not complete to. byShell:
// the files are the shell's own completion, which bash adds in readline
// (complete -o default), outside the COMPREPLY the test reads.
var completionCases = []struct {
	line      string
	want, not []string
	byShell   bool
}{
	{line: "leasehold ru", want: []string{"run"}},
	{line: "leasehold st", want: []string{"status", "store"}},
	{line: "leasehold force", want: []string{"force-release"}},
	{line: "leasehold completion ", want: []string{"bash", "fish", "zsh"}},
	{line: "leasehold store ", want: []string{"init"}},
	{line: "leasehold serve --log-le", want: []string{"--log-level"}},
	{line: "leasehold serve --log-level ", want: []string{"debug", "info", "warn", "error"}, not: []string{"afile"}},
	{line: "leasehold run --store re", want: []string{"redis://", "rediss://"}, not: []string{"afile"}},
	{line: "leasehold run ", not: []string{"afile", "bash"}},
	{line: "leasehold status ", not: []string{"afile"}},
	{line: "leasehold hold --ttl ", not: []string{"afile"}},
	{line: "leasehold sfn --format ", want: []string{"machine", "cleanup", "cloudformation", "terraform"}},
	{line: "leasehold serve --auth-file af", want: []string{"afile"}, byShell: true},
	// After "--" of run and elect: the command's name as the shell
	// completes a command (lhcompxyzzy is a program in PATH, see
	// completionTestDir), then its arguments by its own completion
	// (alpha, bravo) or files. Before the "--": "--" itself.
	{line: "leasehold run n1 -- lhcompxy", want: []string{"lhcompxyzzy"}, not: []string{"afile"}},
	{line: "leasehold elect e1 -- lhcompxy", want: []string{"lhcompxyzzy"}},
	{line: "leasehold run --ttl 3s n1 -w 5 -- lhcompxy", want: []string{"lhcompxyzzy"}},
	{line: "leasehold --connect-timeout 5s run --ttl=3s n1 -- lhcompxy", want: []string{"lhcompxyzzy"}},
	{line: "leasehold run -- -n1 -- lhcompxy", want: []string{"lhcompxyzzy"}},
	{line: "leasehold run n1 -- lhcompxyzzy al", want: []string{"alpha"}, not: []string{"afile"}},
	{line: "leasehold run n1 -- lhcompxyzzy -- lhcompxyzzy ", want: []string{"alpha", "bravo"}},
	{line: "leasehold run n1 -- ls af", want: []string{"afile"}, byShell: true},
	{line: "leasehold run n1 ", want: []string{"--"}, not: []string{"afile", "lhcompxyzzy"}},
	{line: "leasehold elect e1 ", want: []string{"--"}, not: []string{"afile"}},
	{line: "leasehold run -- -n1 ", want: []string{"--"}, not: []string{"afile"}},
	{line: "leasehold hold h1 ", not: []string{"afile", "--"}},
	{line: "leasehold status -- lhcompxy", not: []string{"lhcompxyzzy"}},
}

// completionTestDir makes the working directory of the completion tests
// (with a file afile) and a directory of programs with lhcompxyzzy, a
// program no system has, and returns both.
func completionTestDir(t *testing.T) (dir, bindir string) {
	t.Helper()
	dir, bindir = t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "afile"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bindir, "lhcompxyzzy"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, bindir
}

// completionPath is PATH for the shells of the completion tests: bindir
// and bin's directory (the scripts complete the command named leasehold)
// first.
func completionPath(bindir string) string {
	return bindir + string(os.PathListSeparator) + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")
}

// bashCompletionLib is the bash-completion package's library, which the
// script needs (as its help says).
const bashCompletionLib = "/usr/share/bash-completion/bash_completion"

// TestCompletionBash completes lines in bash through the script, as the
// shell does on Tab (COMP_WORDS, COMP_CWORD, then the function the script
// registers for leasehold), with the bash-completion package's library
// loaded. lhcompxyzzy completes alpha and bravo.
func TestCompletionBash(t *testing.T) {
	sh := tool(t, "bash")
	if _, err := os.Stat(bashCompletionLib); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bash-completion is not installed (CI: scripts/engines.sh installs it): %v", err)
		}
		t.Skipf("bash-completion is not installed: %v", err)
	}
	script := completionScript(t, "bash")
	dir, bindir := completionTestDir(t)
	for _, c := range completionCases {
		if c.byShell {
			continue
		}
		t.Run(c.line, func(t *testing.T) {
			words := strings.Fields(c.line)
			if strings.HasSuffix(c.line, " ") {
				words = append(words, "")
			}
			words[0] = bin
			var quoted []string
			for _, w := range words {
				quoted = append(quoted, "'"+w+"'")
			}
			prog := `source "$2"
source "$1"
complete -W 'alpha bravo' lhcompxyzzy
COMP_WORDS=(` + strings.Join(quoted, " ") + `)
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_LINE="${COMP_WORDS[*]}"
COMP_POINT=${#COMP_LINE}
spec=$(complete -p leasehold) && f=${spec#* -F } && f=${f%% *} || exit 1
"$f" leasehold "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}" 2>/dev/null
printf '%s\n' "${COMPREPLY[@]}"`
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, sh, "-c", prog, "bash", script, bashCompletionLib)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "PATH="+completionPath(bindir))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v\n%s%s", err, out, stderr.String())
			}
			checkOffered(t, strings.Fields(string(out)), c.want, c.not)
		})
	}
}

// TestCompletionFish completes the same lines in fish (complete -C).
func TestCompletionFish(t *testing.T) {
	sh := tool(t, "fish")
	script := completionScript(t, "fish")
	dir, bindir := completionTestDir(t)
	// The script completes the command named leasehold: bin, through PATH.
	path := completionPath(bindir)
	for _, c := range completionCases {
		t.Run(c.line, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, sh, "--no-config", "-c",
				`source $argv[1]; complete -c lhcompxyzzy -f -a 'alpha bravo'; complete -C $argv[2]`, script, c.line)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "PATH="+path, "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var offered []string
			for _, l := range strings.Split(string(out), "\n") {
				// "word<Tab>description"
				if w, _, _ := strings.Cut(l, "\t"); w != "" {
					offered = append(offered, w)
				}
			}
			checkOffered(t, offered, c.want, c.not)
		})
	}
}

func checkOffered(t *testing.T, offered, want, not []string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(offered, w) {
			t.Errorf("%q not offered; offered %q", w, offered)
		}
	}
	for _, n := range not {
		if slices.Contains(offered, n) {
			t.Errorf("%q offered; offered %q", n, offered)
		}
	}
}
