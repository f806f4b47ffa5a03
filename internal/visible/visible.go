// Package visible escapes identifiers for a terminal or a log line, as
// the dashboard shows them: nothing in a name can reorder, hide or imitate
// the text around it.
package visible

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// String shows an identifier (a lease name, an owner) in a terminal as
// the dashboard does: printable ASCII as it is, a backslash doubled, a
// space at either end or beside another as \x20, and everything else
// escaped (\n, \t, \x1B, \xE9, \u202E, \u{E0041}), so that no name can
// reorder, hide or imitate the text around it ("status" printed U+202E
// raw, which reversed its row).
func String(s string) string {
	simple := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == '\\' {
			simple = false
			break
		}
	}
	if simple {
		return s
	}
	var b strings.Builder
	runes := []rune(s)
	for i, r := range runes {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == ' ':
			if i > 0 && i < len(runes)-1 && runes[i-1] != ' ' && runes[i+1] != ' ' {
				b.WriteByte(' ')
			} else {
				b.WriteString(`\x20`)
			}
		case r > 0x20 && r < 0x7f:
			b.WriteRune(r)
		case r == utf8.RuneError:
			b.WriteString(`\uFFFD`)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02X`, r)
		case r > 0xffff:
			fmt.Fprintf(&b, `\u{%05X}`, r)
		default:
			fmt.Fprintf(&b, `\u%04X`, r)
		}
	}
	return b.String()
}
