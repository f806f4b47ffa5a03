package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
)

// Strict JSON. encoding/json matches keys to fields case-insensitively
// (so "OWNER" would set owner), lets a later duplicate key win, and turns
// invalid UTF-8 and lone surrogate escapes into U+FFFD. A request that
// means something other than what it says must not pass, so before
// decoding, httpStrictJSON walks the body's tokens alongside the Go type
// it is decoded into and refuses all four.

// httpStrictJSON checks body for decoding into a value of type t (a
// pointer, as given to json.Unmarshal). It returns an *InvalidError for a
// body that is not valid UTF-8, has a \u escape that is half of a UTF-16
// surrogate pair, repeats a key in an object, or has a key that is not
// exactly one of its struct's fields; nil otherwise. Malformed JSON is
// left for the decoder to report.
func httpStrictJSON(body []byte, t reflect.Type) error {
	for i := 0; i < len(body); {
		r, n := utf8.DecodeRune(body[i:])
		if r == utf8.RuneError && n <= 1 {
			return &leasehold.InvalidError{Field: "body", Reason: fmt.Sprintf("not valid UTF-8 (at byte %d): JSON text must be UTF-8", i)}
		}
		i += n
	}
	if err := httpCheckEscapes(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	err := httpWalk(dec, t, "")
	if _, ok := err.(*leasehold.InvalidError); ok {
		return err
	}
	return nil // syntax errors: the decoder reports them
}

// httpCheckEscapes refuses a \uXXXX escape in a string that is a lone
// surrogate (a high one not followed by a low one, or a low one alone).
func httpCheckEscapes(b []byte) error {
	in := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !in {
			in = c == '"'
			continue
		}
		switch c {
		case '"':
			in = false
		case '\\':
			r, ok := httpHex4(b, i)
			if !ok {
				i++ // an escaped character (or malformed: the decoder says so)
				continue
			}
			switch {
			case r >= 0xD800 && r < 0xDC00:
				if lo, ok := httpHex4(b, i+6); ok && lo >= 0xDC00 && lo < 0xE000 {
					i += 11
					continue
				}
			case r >= 0xDC00 && r < 0xE000:
			default:
				i += 5
				continue
			}
			return &leasehold.InvalidError{Field: "body", Reason: fmt.Sprintf(
				"the escape %s at byte %d is half of a UTF-16 surrogate pair, not a character", b[i:i+6], i)}
		}
	}
	return nil
}

// httpHex4 reads the escape \uXXXX at b[i:].
func httpHex4(b []byte, i int) (rune, bool) {
	if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[i+2 : i+6] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// httpWalk reads one value from dec, checking its objects' keys against t
// (nil: any value, whose objects are checked for duplicates only). at is
// the value's place, for errors ("" for the body).
func httpWalk(dec *json.Decoder, t reflect.Type, at string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		var fields map[string]reflect.Type
		var elem reflect.Type
		switch {
		case t == nil:
		case t.Kind() == reflect.Struct:
			fields = map[string]reflect.Type{}
			httpFields(t, fields)
		case t.Kind() == reflect.Map:
			elem = t.Elem()
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := kt.(string)
			place := key
			if at != "" {
				place = at + "." + key
			}
			if seen[key] {
				return &leasehold.InvalidError{Field: place, Reason: "duplicate key (each key may appear once in an object)"}
			}
			seen[key] = true
			vt := elem
			if fields != nil {
				ft, ok := fields[key]
				if !ok {
					for name := range fields {
						if strings.EqualFold(name, key) {
							return &leasehold.InvalidError{Field: place, Reason: fmt.Sprintf("unknown field (keys are case-sensitive: did you mean %q?)", name)}
						}
					}
					return &leasehold.InvalidError{Field: place, Reason: "unknown field"}
				}
				vt = ft
			}
			if err := httpWalk(dec, vt, place); err != nil {
				return err
			}
		}
		_, err := dec.Token() // '}'
		return err
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := httpWalk(dec, elem, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	}
	return nil
}

// httpFields adds the JSON names of struct type t's fields (those of
// embedded structs without a name included) and their types to m.
func httpFields(t reflect.Type, m map[string]reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" && f.Anonymous {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				httpFields(ft, m)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
}
