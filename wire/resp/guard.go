package resp

import "bytes"

// LooksLikeHTTP reports whether a command read by ReadCommand is in fact
// part of an HTTP request: a request line ("POST /path HTTP/1.1", any
// method, also HTTP/2's "PRI * HTTP/2.0") or a header line naming the
// host ("Host: ..."), or the word POST, which is never a command here.
//
// A browser can be made to send an HTTP request to any port a page names,
// with a body the page chooses; read as RESP, the request line and headers
// are inline commands and the body's lines are commands too. A server
// must close such a connection before it runs anything (as Redis does on
// "POST" and "Host:"): every browser request starts with its request line
// and carries a Host header.
func LooksLikeHTTP(args [][]byte) bool {
	if len(args) == 0 {
		return false
	}
	if bytes.EqualFold(args[0], []byte("host:")) || bytes.EqualFold(args[0], []byte("post")) {
		return true
	}
	// "Host:value" without a space is one word.
	if len(args[0]) > 5 && bytes.EqualFold(args[0][:5], []byte("host:")) {
		return true
	}
	if len(args) == 3 && len(args[2]) >= 5 && bytes.EqualFold(args[2][:5], []byte("HTTP/")) && isToken(args[0]) {
		return true
	}
	return false
}

// isToken reports whether b could be an HTTP method (an RFC 9110 token).
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0:
		default:
			return false
		}
	}
	return true
}
