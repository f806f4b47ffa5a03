package server

import (
	"os"
	"strings"
	"testing"
)

// respDocAccess is how docs/protocol.md's command table states a row's
// access.
func respDocAccess(r *respCmd) string {
	switch {
	case r.preAuth:
		return "before AUTH"
	case r.scope == scopeNone:
		return "any"
	case r.scope == scopeName:
		return r.access.String() + " on name"
	case r.scope == scopePrefix:
		return r.access.String() + " on prefix"
	}
	return r.access.String() + " on some prefix"
}

// TestRESPDocsTable: docs/protocol.md's command table has a line for every
// row of the command table, with its access, and no line for a command
// the server does not have.
func TestRESPDocsTable(t *testing.T) {
	b, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n| command | access | reply |\n| --- | --- | --- |\n")
	if !ok {
		t.Fatal("docs/protocol.md: no command table (| command | access | reply |)")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	doc := map[string]string{} // "LH.SESSION OPEN" → access column
	for _, line := range strings.Split(table, "\n") {
		cmd, ok := strings.CutPrefix(line, "| `")
		cols := strings.Split(line, " | ")
		words := strings.Fields(strings.SplitN(cmd, "`", 2)[0])
		if !ok || len(cols) != 3 || len(words) == 0 {
			t.Errorf("docs/protocol.md: malformed line in the command table: %s", line)
			continue
		}
		key := words[0]
		if rows := respByName[key]; len(rows) > 0 && rows[0].sub != "" && len(words) > 1 {
			key += " " + words[1]
		}
		doc[key] = cols[1]
	}
	for _, r := range respCommands {
		key := strings.TrimSpace(r.name + " " + r.sub)
		got, ok := doc[key]
		switch {
		case !ok:
			t.Errorf("docs/protocol.md: no line for %s in the command table", key)
		case got != respDocAccess(r):
			t.Errorf("docs/protocol.md: %s needs %q, the table says %q", key, respDocAccess(r), got)
		}
		delete(doc, key)
	}
	for key := range doc {
		t.Errorf("docs/protocol.md lists %s, which the command table does not have", key)
	}
}
