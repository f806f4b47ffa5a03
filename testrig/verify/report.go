// Package verify is the harness of leasehold's fault suites (R1–R12 of the
// verification plan): an operation recorder, an oracle resource that checks
// fencing tokens, subprocess workers that can be paused and killed, fault
// injectors, the checkers, and the report every suite writes its figure to.
package verify

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Row is one line of the verification report: what a suite did to a store
// and what the checkers said.
type Row struct {
	Suite      string `json:"suite"`      // "R3", "R4-unfenced", ...
	Store      string `json:"store"`      // "sqlite", "redis", "server", ...
	Ops        int    `json:"ops"`        // operations recorded (or cases run)
	Faults     int    `json:"faults"`     // faults injected
	Violations int    `json:"violations"` // safety violations found
	Checker    string `json:"checker"`    // "ok", "illegal", "unknown", "caught 10/10", ...
	Note       string `json:"note,omitempty"`
}

func (r Row) String() string {
	s := fmt.Sprintf("%s %s: %d ops, %d faults, %d violations, checker %s", r.Suite, r.Store, r.Ops, r.Faults, r.Violations, r.Checker)
	if r.Note != "" {
		s += " (" + r.Note + ")"
	}
	return s
}

// CountsNote renders counts as "name n, name n, ..." in the order of the
// names, for a row's note ("" for none).
func CountsNote(counts map[string]int) string {
	parts := make([]string, 0, len(counts))
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

var reportMu sync.Mutex

// EnvReport names the file that Report appends its rows to.
const EnvReport = "LEASEHOLD_VERIFY_REPORT"

// Report logs row on t and, when $LEASEHOLD_VERIFY_REPORT names a file,
// appends it there as a JSON line for scripts/verify.sh to print.
func Report(t testing.TB, row Row) {
	t.Helper()
	t.Log("verify: " + row.String())
	path := os.Getenv(EnvReport)
	if path == "" {
		return
	}
	b, err := json.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		t.Fatalf("report: %v", err)
	}
}

// Long reports whether the long tier was asked for (LEASEHOLD_LONG=1).
func Long() bool {
	v, _ := strconv.ParseBool(os.Getenv("LEASEHOLD_LONG"))
	return v
}

// Size returns short in the default tier and long in the long tier.
func Size[T any](short, long T) T {
	if Long() {
		return long
	}
	return short
}

// EnvDump names a directory to write a failed run's histories to (one JSON
// event a line), for a closer look.
const EnvDump = "LEASEHOLD_VERIFY_DUMP"

// Dump writes h to a new file name-*.jsonl in $LEASEHOLD_VERIFY_DUMP, if
// that is set.
func Dump(t testing.TB, name string, h *History) {
	dir := os.Getenv(EnvDump)
	if dir == "" {
		return
	}
	f, err := os.CreateTemp(dir, name+"-*.jsonl")
	if err != nil {
		t.Logf("dump: %v", err)
		return
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, ev := range h.Events {
		_ = enc.Encode(ev)
	}
	t.Logf("history written to %s", f.Name())
}

// DumpDir copies the directory dir (an engine's data and log) to a new
// directory name-* in $LEASEHOLD_VERIFY_DUMP, if that is set.
func DumpDir(t testing.TB, name, dir string) {
	to := os.Getenv(EnvDump)
	if to == "" || dir == "" {
		return
	}
	d, err := os.MkdirTemp(to, name+"-*")
	if err == nil {
		err = os.CopyFS(d, os.DirFS(dir))
	}
	if err != nil {
		t.Logf("dump %s: %v", dir, err)
		return
	}
	t.Logf("%s copied to %s", dir, d)
}
