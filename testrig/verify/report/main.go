// Command report prints the verification report: the JSON lines the fault
// suites append to $LEASEHOLD_VERIFY_REPORT, as one Markdown table. It
// exits 1 if any row has violations or a checker result other than "ok"
// (or "caught N/M" for the suites that must fail), 2 if it cannot read the
// report. scripts/verify.sh runs it.
//
//	go run ./testrig/verify/report FILE
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type row struct {
	Suite      string `json:"suite"`
	Store      string `json:"store"`
	Ops        int    `json:"ops"`
	Faults     int    `json:"faults"`
	Violations int    `json:"violations"`
	Checker    string `json:"checker"`
	Note       string `json:"note"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: report FILE (the JSON lines of $LEASEHOLD_VERIFY_REPORT)")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(2)
	}
	defer f.Close()
	rows, err := read(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(2)
	}
	if bad := print(os.Stdout, rows); bad > 0 {
		fmt.Fprintf(os.Stderr, "report: %d row(s) with violations or a checker result that is not a pass\n", bad)
		os.Exit(1)
	}
}

func read(r io.Reader) ([]row, error) {
	var rows []row
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var x row
		if err := json.Unmarshal([]byte(line), &x); err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		rows = append(rows, x)
	}
	return rows, sc.Err()
}

// passed says whether a row is a pass: no violations and the checker
// said ok — or, for the suites that prove the checks can fail (the
// unfenced control, the deliberate bugs), that they were caught often
// enough, which those suites assert themselves.
func passed(r row) bool {
	if strings.HasPrefix(r.Checker, "caught ") {
		return true
	}
	return r.Violations == 0 && r.Checker == "ok"
}

func suiteKey(s string) (int, string) {
	var n int
	fmt.Sscanf(strings.TrimPrefix(s, "R"), "%d", &n)
	return n, s
}

func print(w io.Writer, rows []row) int {
	sort.SliceStable(rows, func(i, j int) bool {
		ni, si := suiteKey(rows[i].Suite)
		nj, sj := suiteKey(rows[j].Suite)
		if ni != nj {
			return ni < nj
		}
		if si != sj {
			return si < sj
		}
		return rows[i].Store < rows[j].Store
	})
	fmt.Fprintln(w, "| suite | store | operations | faults injected | violations | checker | notes |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | --- | --- |")
	bad, ops, faults := 0, 0, 0
	for _, r := range rows {
		mark := ""
		if !passed(r) {
			bad++
			mark = " **FAIL**"
		}
		ops += r.Ops
		faults += r.Faults
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %s%s | %s |\n", r.Suite, r.Store, r.Ops, r.Faults, r.Violations, r.Checker, mark,
			strings.ReplaceAll(r.Note, "|", "/"))
	}
	fmt.Fprintf(w, "\n%d rows, %d operations, %d faults injected, %d row(s) failed.\n", len(rows), ops, faults, bad)
	return bad
}
