// Package redact hides the secrets that store URLs carry (a password in
// the user info, a token or key in the query) before a URL, or an error or
// log line that quotes one, is shown to anyone: every log line, error and
// page that names a store URL goes through it.
//
// What counts as a secret: the password of the user info
// ("postgres://user:pass@host", "redis://:pass@host") and the value of
// every query parameter whose name says it holds one (token, password,
// secret, AWS keys, signatures: see isSecretKey), also misspelt
// ("pasword", "sslpasword": a store quotes the URL when it refuses the
// typo). Host names, paths, user names and other parameters are kept, so
// that the redacted URL still says which store it is.
package redact

import (
	"net/url"
	"regexp"
	"strings"

	"github.com/leasehold/leasehold/internal/editdist"
)

// Mask replaces each secret.
const Mask = "REDACTED"

// urlPattern finds URLs in free text (an error message, a log line).
var urlPattern = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>` + "`" + `]+`)

// URL returns raw with its secrets replaced by Mask. A URL that does not
// parse is scrubbed as text (String), never returned as it was.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// The whole string is one URL: its user info may hold spaces.
		return scrubText(looseUserinfo.ReplaceAllString(raw, "${1}"+Mask+"${3}"))
	}
	changed := false
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Mask)
			changed = true
		} else if userIsPassword(u.Scheme) && u.User.Username() != "" {
			u.User = url.User(Mask)
			changed = true
		}
	}
	if u.RawQuery != "" {
		if q := redactQuery(u.RawQuery); q != u.RawQuery {
			u.RawQuery, changed = q, true
		}
	}
	if !changed {
		return scrubText(raw) // as written ("memory://" stays so)
	}
	// Scrub the result as text too: a secret in the path or fragment.
	return scrubText(u.String())
}

// userIsPassword reports whether a URL of scheme takes a lone user name
// as the password: Redis users write "redis://PASSWORD@host" (Redis
// before 6 had passwords only).
func userIsPassword(scheme string) bool {
	return strings.HasPrefix(strings.ToLower(scheme), "redis")
}

// redactQuery masks the values of secret parameters, and of parameters
// whose value holds a secret-named pair (PostgreSQL's
// "options=-c password=..."), keeping the order and spelling of the others.
func redactQuery(q string) string {
	parts := strings.Split(q, "&")
	for i, p := range parts {
		k, v, hasValue := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if hasValue && (isSecretKey(name) || holdsSecret(v)) {
			parts[i] = k + "=" + Mask
		}
	}
	return strings.Join(parts, "&")
}

// holdsSecret reports whether a query value, decoded, holds a
// secret-named "key=value" pair.
func holdsSecret(v string) bool {
	d, err := url.QueryUnescape(v)
	if err != nil {
		d = v
	}
	return textSecret.MatchString(d)
}

// secretWords are the parts of a parameter name that mark a secret.
var secretWords = []string{
	"token", "password", "passwd", "pwd", "pass", "secret", "apikey", "api_key", "api-key",
	"credential", "signature", "sig", "auth", "session", "private",
}

// settingKeys are parameters whose names hold a secret word but whose
// values are settings, never secrets: libpq's target_session_attrs
// ("read-write", which PostgreSQL's read-only hint shows) and require_auth
// ("scram-sha-256").
var settingKeys = map[string]bool{"target_session_attrs": true, "require_auth": true}

func isSecretKey(name string) bool {
	n := strings.ToLower(name)
	if settingKeys[n] {
		return false
	}
	for _, w := range secretWords {
		if n == w || strings.Contains(n, w) {
			return true
		}
	}
	// AWS: aws_access_key_id is an id and kept; the secret key and the
	// session token contain "secret" and "token".
	return nearSecretWord(n)
}

// typoWords are the secret words whose misspellings are secrets too: a
// store refuses "pasword=" as a typo of "password=", and its error quotes
// the URL, value and all.
var typoWords = []string{"password", "passwd", "secret", "token", "credential", "signature", "apikey", "api_key"}

// nearSecretWord reports whether a part of n is a typo of a secret word:
// within one edit (a swap of two neighbours is one), two for words of 8
// letters or more ("sslpasword", "sentinel_passwrod", "secert").
func nearSecretWord(n string) bool {
	for _, w := range typoWords {
		tol := 1
		if len(w) >= 8 {
			tol = 2
		}
		for i := range len(n) {
			for l := len(w) - tol; l <= len(w)+tol && i+l <= len(n); l++ {
				if editdist.DistanceSwap(n[i:i+l], w) <= tol {
					return true
				}
			}
		}
	}
	return false
}

// textSecret finds "key=value" pairs of secret keys outside URLs (a DSN
// quoted in an error: "password=..." or "token: ...").
var textSecret = regexp.MustCompile(`(?i)\b([a-z0-9_.-]*(?:token|password|passwd|pwd|secret|apikey|api_key|credential|signature)[a-z0-9_.-]*)(\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s&,;"'<>]+)`)

// userinfoPassword finds the password of a URL's user info in text.
var userinfoPassword = regexp.MustCompile(`(://[^/@\s:]*:)([^@\s/]+)(@)`)

// looseUserinfo is userinfoPassword for a string known to be one URL.
var looseUserinfo = regexp.MustCompile(`^([^:]*://[^/@:]*:)([^@]*)(@)`)

func scrubText(s string) string {
	s = userinfoPassword.ReplaceAllString(s, "${1}"+Mask+"${3}")
	return textSecret.ReplaceAllString(s, "${1}${2}"+Mask)
}

// String returns s with the secrets of every URL in it, and of every
// secret-named "key=value" pair, replaced by Mask.
func String(s string) string {
	s = urlPattern.ReplaceAllStringFunc(s, URL)
	return scrubText(s)
}

// Error returns err with its message redacted (String); errors.Is and
// errors.As still see err. Extra strings (the secrets of a URL the error
// may quote in another form, see Secrets) are masked wherever they occur.
// A nil err gives nil.
func Error(err error, extra ...string) error {
	if err == nil {
		return nil
	}
	msg := String(err.Error())
	for _, s := range extra {
		if len(s) >= 4 { // shorter ones would mask ordinary words
			msg = strings.ReplaceAll(msg, s, Mask)
		}
	}
	if msg == err.Error() {
		return err
	}
	return &redacted{msg: msg, err: err}
}

// Secrets returns the secret values in raw (the password, the secret
// query values, decoded and as written), for Error.
func Secrets(raw string) []string {
	var out []string
	if m := userinfoPassword.FindStringSubmatch(raw); m != nil {
		out = append(out, m[2])
		if d, err := url.PathUnescape(m[2]); err == nil && d != m[2] {
			out = append(out, d)
		}
	}
	if u, err := url.Parse(raw); err == nil && u.User != nil && userIsPassword(u.Scheme) {
		if _, has := u.User.Password(); !has && u.User.Username() != "" {
			out = append(out, u.User.Username())
		}
	}
	if _, q, ok := strings.Cut(raw, "?"); ok {
		q, _, _ = strings.Cut(q, "#")
		for _, p := range strings.Split(q, "&") {
			k, v, hasValue := strings.Cut(p, "=")
			name, err := url.QueryUnescape(k)
			if err != nil {
				name = k
			}
			if hasValue && v != "" && (isSecretKey(name) || holdsSecret(v)) {
				out = append(out, v)
				if d, err := url.QueryUnescape(v); err == nil && d != v {
					out = append(out, d)
				}
			}
		}
	}
	return out
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }
