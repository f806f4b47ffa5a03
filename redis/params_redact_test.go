package redis

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/redact"
)

// TestParamsNotRedacted: redact masks the values of misspelt secret
// parameters (red team); the URL parameters that hold no
// secret stay shown.
func TestParamsNotRedacted(t *testing.T) {
	for _, p := range urlParams {
		if strings.Contains(p, "pass") {
			continue
		}
		if raw := "redis://h:6379/0?" + p + "=v4lue"; redact.URL(raw) != raw {
			t.Errorf("redact.URL(%q) = %q, want it unchanged", raw, redact.URL(raw))
		}
	}
}
