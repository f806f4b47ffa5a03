package server

import (
	"strings"

	"github.com/leasehold/leasehold"
)

// CheckName applies the server's rules for names arriving from the network,
// on top of leasehold.ValidateName: a name reaches the server percent-decoded
// exactly once (by the front end), and is then refused if it still looks
// encoded ("%2F", "%252F": a second decoding somewhere else could make it
// another name) or has "." or ".." segments or empty segments between
// slashes (a path-normalising proxy would turn "a/../b" into "b"). Names
// are otherwise compared byte for byte, never normalised, so look-alike
// characters are simply different names.
func CheckName(name string) error {
	if err := leasehold.ValidateName(name); err != nil {
		return err
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '%' && i+2 < len(name) && ishex(name[i+1]) && ishex(name[i+2]) {
			return &leasehold.InvalidError{Field: "name", Reason: "contains a percent-encoded sequence after decoding (double encoding is refused)"}
		}
	}
	segs := strings.Split(name, "/")
	for i, seg := range segs {
		switch {
		case seg == "." || seg == "..":
			return &leasehold.InvalidError{Field: "name", Reason: `has a "." or ".." segment`}
		case seg == "" && i > 0 && i < len(segs)-1:
			return &leasehold.InvalidError{Field: "name", Reason: `has an empty segment ("//")`}
		}
	}
	return nil
}

// CheckPrefix is CheckName for a list or watch prefix, which may be empty.
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return CheckName(prefix)
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
