package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestReportTable(t *testing.T) {
	in := `{"suite":"R10","store":"token-reuse","ops":10,"faults":1,"violations":10,"checker":"caught 10/10"}
{"suite":"R2","store":"redis","ops":2400,"faults":0,"violations":0,"checker":"ok","note":"16/16 keys | ok"}

{"suite":"R3","store":"server","ops":900,"faults":12,"violations":0,"checker":"unknown"}
{"suite":"R3","store":"redis","ops":900,"faults":12,"violations":1,"checker":"ok"}
`
	rows, err := read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	bad := print(&out, rows)
	if bad != 2 {
		t.Errorf("%d failed rows, want 2 (an unknown checker result and a violation)\n%s", bad, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	// header, separator, R2, R3 redis, R3 server, R10 — sorted by suite number, then store.
	want := []string{"| R2 | redis |", "| R3 | redis |", "| R3 | server |", "| R10 | token-reuse |"}
	for i, w := range want {
		if !strings.HasPrefix(lines[2+i], w) {
			t.Errorf("row %d = %q, want it to start with %q", i, lines[2+i], w)
		}
	}
	if !strings.Contains(out.String(), "16/16 keys / ok") {
		t.Errorf("a | in a note must not break the table:\n%s", out.String())
	}
	if _, err := read(strings.NewReader("{not json}\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad line: err %v, want one naming line 1", err)
	}
}
