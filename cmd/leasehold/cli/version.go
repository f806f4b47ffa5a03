package cli

import (
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold/internal/editdist"
)

// Commit and CommitDate name the VCS commit a release build was made from
// and that commit's date (RFC 3339), set with -ldflags -X (see
// scripts/build-release.sh) where the build cannot record them itself: a
// source tarball, or GOFLAGS=-buildvcs=false. Set, they win over what the
// build recorded.
var (
	Commit     = ""
	CommitDate = ""
)

// versionLine is what "leasehold version" and "leasehold --version" print
// after "leasehold ": the version, the VCS commit and its date as the
// build recorded them, "unknown" for what it did not (a build with
// -buildvcs=false records neither).
func versionLine() string {
	commit, date, modified := "unknown", "unknown", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				date = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		// "go install ...@main" records no VCS settings, but its
		// pseudo-version names the commit (12 digits) and its time.
		if c, d, ok := pseudoVersionCommit(bi.Main.Version); ok && commit == "unknown" {
			commit, date = c, d
		}
	}
	if modified {
		commit += "+modified"
	}
	if Commit != "" {
		commit = Commit
	}
	if CommitDate != "" {
		date = CommitDate
	}
	return fmt.Sprintf("%s (commit %s, dated %s)", version(), commit, date)
}

// pseudoVersionCommit returns the commit prefix and the UTC time (RFC
// 3339) a Go pseudo-version (v0.0.0-20260801120000-abcdef123456, or
// vX.Y.(Z+1)-0.20260801120000-abcdef123456, or with -pre.0.) names.
func pseudoVersionCommit(v string) (commit, date string, ok bool) {
	v, _, _ = strings.Cut(v, "+") // +incompatible, +dirty
	i := strings.LastIndexByte(v, '-')
	if i < 0 || len(v)-i-1 != 12 {
		return "", "", false
	}
	rev, rest := v[i+1:], v[:i]
	if strings.Trim(rev, "0123456789abcdef") != "" || len(rest) < 14 {
		return "", "", false
	}
	stamp := rest[len(rest)-14:]
	if sep := rest[:len(rest)-14]; !strings.HasSuffix(sep, "-") && !strings.HasSuffix(sep, ".") {
		return "", "", false
	}
	t, err := time.Parse("20060102150405", stamp)
	if err != nil {
		return "", "", false
	}
	return rev, t.UTC().Format(time.RFC3339), true
}

// flagError makes cobra's flag errors usage errors, with a suggestion for
// an unknown flag that is close to one the command has.
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	var bad string
	switch {
	case strings.HasPrefix(msg, "unknown flag: --"):
		bad = strings.TrimPrefix(msg, "unknown flag: --")
	case strings.HasPrefix(msg, "unknown shorthand flag: "):
		// "unknown shorthand flag: 'x' in -xyz": suggest for the whole word
		if i := strings.LastIndex(msg, " in -"); i >= 0 {
			bad = msg[i+len(" in -"):]
		}
	}
	if bad != "" {
		if s := suggestFlag(cmd, bad); s != "" {
			return usagef("%v\nDid you mean --%s?", err, s)
		}
	}
	return usagef("%v", err)
}

// suggestFlag returns the name of cmd's flag nearest to bad (an edit
// distance of at most 2, or bad a prefix of it), or "".
func suggestFlag(cmd *cobra.Command, bad string) string {
	bad = strings.ToLower(strings.SplitN(bad, "=", 2)[0])
	best, bestD := "", 3
	visit := func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := editdist.Distance(bad, f.Name)
		if len(bad) >= 2 && strings.HasPrefix(f.Name, bad) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = f.Name, d
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	return best
}
