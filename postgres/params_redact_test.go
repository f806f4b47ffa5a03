package postgres

import (
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/redact"
)

// TestParamsNotRedacted: redact masks the values of misspelt secret
// parameters (red team); the parameters that hold no
// secret stay shown.
func TestParamsNotRedacted(t *testing.T) {
	for _, p := range slices.Concat(pgxParams, ownParams, libpqOnly) {
		if strings.Contains(p, "pass") {
			continue
		}
		if raw := "postgres://h/db?" + p + "=v4lue"; redact.URL(raw) != raw {
			t.Errorf("redact.URL(%q) = %q, want it unchanged", raw, redact.URL(raw))
		}
	}
}
