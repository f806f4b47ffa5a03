package enginetest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestEnginesShExportsTheTable checks that scripts/engines.sh, the shell
// starter of the shared test servers, exports the variables that each
// External row of enginetest.Engines names, and that every row is whole.
func TestEnginesShExportsTheTable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "scripts", "engines.sh"))
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	seen := map[string]bool{}
	for _, e := range enginetest.Engines {
		if seen[e.Store] {
			t.Errorf("%s: two rows", e.Store)
		}
		seen[e.Store] = true
		if e.Title == "" || e.URL == nil {
			t.Errorf("%s: no Title or URL", e.Store)
		}
		if e.Kind != enginetest.External {
			if e.URLVar != "" || e.BinVar != "" {
				t.Errorf("%s is not External but names variables", e.Store)
			}
			continue
		}
		for _, v := range []string{e.URLVar, e.BinVar} {
			if v == "" {
				t.Errorf("%s: External without URLVar or BinVar", e.Store)
			} else if !strings.Contains(script, "export "+v+"=") {
				t.Errorf("scripts/engines.sh does not export %s (%s)", v, e.Store)
			}
		}
	}
}
