// Package randid makes the random identifiers of this module (owner
// suffixes, request ids): n bytes from crypto/rand, hex-encoded.
package randid

import (
	"crypto/rand"
	"encoding/hex"
)

// Hex returns n random bytes as 2n lowercase hex digits.
func Hex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail (Go 1.24+)
	return hex.EncodeToString(b)
}
