package server

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold"
)

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "jobs/nightly", "a/b/", "50% off", "a%zz", "é/ü", "a／b"} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "a/../b", "..", "a/.", "./a", "a//b", "a%2Fb", "a%zz%2F", "%252F", "a\x00b", "a\nb"} {
		if err := CheckName(bad); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("CheckName(%q) = %v, want an *InvalidError", bad, err)
		}
	}
}
