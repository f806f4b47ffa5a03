package server

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode"

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

// TestCheckNameInvisible: every class of invisible, bidi-control and
// non-space whitespace character is refused with its U+XXXX and byte
// offset, in names, prefixes and (through httpCheckKey) record keys;
// letters of every script, symbols and the plain space stay allowed.
func TestCheckNameInvisible(t *testing.T) {
	for _, ok := range []string{"jobs/café", "任务/夜间", "x/admin", "a b", "Ωμέγα/ü", "emoji/🙂", "math/∑", "priv/\uE000", "x/\uFFFD"} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", ok, err)
		}
	}
	for _, tc := range []struct {
		class string
		r     rune
	}{
		{"Cc", 0x1B}, {"Cc", 0x7F}, {"Cc", 0x85},
		{"Cf zero width space", 0x200B}, {"Cf ZWNJ", 0x200C}, {"Cf ZWJ", 0x200D}, {"Cf LRM", 0x200E}, {"Cf RLM", 0x200F},
		{"Cf word joiner", 0x2060}, {"Cf invisible plus", 0x2064}, {"Cf BOM", 0xFEFF}, {"Cf soft hyphen", 0x00AD},
		{"Cf arabic letter mark", 0x061C}, {"Cf LRE", 0x202A}, {"Cf RLO", 0x202E}, {"Cf LRI", 0x2066}, {"Cf PDI", 0x2069},
		{"Cf tag", 0xE0041},
		{"Zl", 0x2028}, {"Zp", 0x2029},
		{"Zs no-break space", 0x00A0}, {"Zs ogham", 0x1680}, {"Zs en quad", 0x2000}, {"Zs hair space", 0x200A},
		{"Zs narrow nbsp", 0x202F}, {"Zs math space", 0x205F}, {"Zs ideographic space", 0x3000},
		{"default-ignorable CGJ", 0x034F}, {"Hangul filler", 0x3164}, {"Hangul choseong filler", 0x115F},
		{"halfwidth Hangul filler", 0xFFA0}, {"variation selector", 0xFE0F}, {"variation selector supplement", 0xE0100},
		{"noncharacter", 0xFDD0}, {"noncharacter", 0xFDEF}, {"noncharacter", 0xFFFE}, {"noncharacter", 0xFFFF},
		{"noncharacter", 0x1FFFE}, {"noncharacter", 0x10FFFF},
	} {
		name := "x/admin" + string(tc.r) + "/y"
		err := CheckName(name)
		var inv *leasehold.InvalidError
		if !errors.As(err, &inv) || inv.Field != "name" {
			t.Errorf("%s: CheckName(%q) = %v, want an *InvalidError on name", tc.class, name, err)
			continue
		}
		want := fmt.Sprintf("%U at byte 7", tc.r)
		if !strings.Contains(inv.Reason, want) {
			t.Errorf("%s: CheckName(%q) = %q, want it to say %q", tc.class, name, inv.Reason, want)
		}
		if err := CheckPrefix(name); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("%s: CheckPrefix(%q) = %v, want refused", tc.class, name, err)
		}
		if err := httpCheckKey(name); !errors.As(err, &inv) || inv.Field != "key" || !strings.Contains(inv.Reason, want) {
			t.Errorf("%s: httpCheckKey(%q) = %v, want refused on key saying %q", tc.class, name, err, want)
		}
	}
	// The first offending character is the one named.
	if err := CheckName("é\u202Eb\u200B"); err == nil || !strings.Contains(err.Error(), "U+202E at byte 2") {
		t.Errorf("CheckName with two: %v, want U+202E at byte 2", err)
	}
}

// The ASCII fast path of hiddenClass refuses exactly what the Unicode
// tables refuse: the C0 controls and DEL, nothing printable.
func TestHiddenClassASCII(t *testing.T) {
	for r := rune(0); r < 0x80; r++ {
		refuse := unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) ||
			r != ' ' && unicode.Is(unicode.Zs, r)
		if got := hiddenClass(r) != ""; got != refuse {
			t.Errorf("%U: refused %v, the Unicode tables say %v", r, got, refuse)
		}
	}
}
