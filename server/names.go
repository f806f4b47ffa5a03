package server

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// CheckName applies the server's rules for names arriving from the network,
// on top of storekit.ValidateName: a name reaches the server percent-decoded
// exactly once (by the front end), and is then refused if it still looks
// encoded ("%2F", "%252F": a second decoding somewhere else could make it
// another name) or has "." or ".." segments or empty segments between
// slashes (a path-normalising proxy would turn "a/../b" into "b"). It also
// refuses characters a reader cannot see or tell apart from a space (see
// CheckVisible), so that "x/admin" and "x/admin\u200b" cannot both exist
// through the server. Names are otherwise compared byte for byte, never
// normalised, so look-alike letters are simply different names.
func CheckName(name string) error { return checkName(name, true) }

// CheckExistingName is CheckName without CheckVisible, for operations on
// names that may already exist (read, renew, release, force-release, list,
// watch): a name stored before the visible-character rule, or by the Go
// library on the store directly, can still be read and freed. The rules
// that keep a name from meaning another one further on (encoded
// sequences, "." and ".." and empty segments) still apply.
func CheckExistingName(name string) error { return checkName(name, false) }

// CheckExistingPrefix is CheckExistingName for a prefix, which may be
// empty.
func CheckExistingPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return CheckExistingName(prefix)
}

func checkName(name string, visible bool) error {
	if err := storekit.ValidateName(name); err != nil {
		return err
	}
	if visible {
		if err := CheckVisible("name", name); err != nil {
			return err
		}
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

// CheckVisible refuses, in field, the characters that are invisible, reorder
// the text around them or look like a plain space, naming the first as
// U+XXXX with its byte offset:
//
//   - controls (Cc) and format characters (Cf): zero-width spaces and
//     joiners U+200B–U+200D, marks U+200E/U+200F, bidi embeddings and
//     overrides U+202A–U+202E and isolates U+2066–U+2069, U+2060–U+2064,
//     the byte-order mark U+FEFF, the soft hyphen U+00AD, U+061C, tags;
//   - line and paragraph separators (Zl, Zp: U+2028, U+2029);
//   - whitespace other than the space U+0020 (Zs: U+00A0, U+1680,
//     U+2000–U+200A, U+202F, U+205F, U+3000);
//   - other default-ignorable code points (U+034F, the Hangul fillers
//     U+115F, U+1160, U+3164, U+FFA0, ...) and variation selectors;
//   - noncharacters (U+FDD0–U+FDEF and the last two of every plane).
//
// Letters, digits, punctuation and symbols of any script stay allowed
// ("jobs/café", "任务/夜间"), and so do private-use and unassigned code
// points (what is unassigned changes with Unicode versions; the dashboard
// shows them escaped).
func CheckVisible(field, s string) error {
	for i, r := range s {
		if what := hiddenClass(r); what != "" {
			return &leasehold.InvalidError{Field: field, Reason: fmt.Sprintf(
				"contains %s %U at byte %d (invisible, bidi-control and non-space whitespace characters are refused so that different names never look alike)",
				what, r, i)}
		}
	}
	return nil
}

// hiddenClass says what kind of character CheckVisible refuses r as, or ""
// if r is allowed.
func hiddenClass(r rune) string {
	switch {
	case r >= ' ' && r < 0x7f:
		return "" // printable ASCII and the space: the common case, without table lookups
	case unicode.Is(unicode.Cc, r):
		return "the control character"
	case unicode.Is(unicode.Cf, r):
		return "the invisible format character"
	case unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r):
		return "the line or paragraph separator"
	case unicode.Is(unicode.Zs, r):
		return "the whitespace character"
	case unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || unicode.Is(unicode.Variation_Selector, r):
		return "the invisible character"
	case r >= 0xFDD0 && r <= 0xFDEF || r&0xFFFE == 0xFFFE:
		return "the noncharacter"
	}
	return ""
}
