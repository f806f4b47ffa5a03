package randid

import (
	"encoding/hex"
	"testing"
)

func TestHex(t *testing.T) {
	a, b := Hex(12), Hex(12)
	if len(a) != 24 {
		t.Fatalf("Hex(12) has %d digits, want 24", len(a))
	}
	if _, err := hex.DecodeString(a); err != nil {
		t.Fatalf("Hex(12) = %q: %v", a, err)
	}
	if a == b {
		t.Fatalf("two Hex(12) are equal: %q", a)
	}
}
