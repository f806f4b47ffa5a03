package server

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// hostAllowed reports whether r's Host may be served with auth off: a
// loopback name or address, the address the request came in on (a page
// can only have that origin if it was loaded from this server), or one of
// AllowedHosts. A DNS-rebinding page sends its own host name, which is
// none of these.
func (h *httpAPI) hostAllowed(r *http.Request) bool {
	if h.allowedHosts["*"] {
		return true
	}
	host := hostOnly(r.Host)
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || h.allowedHosts[host] {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ta, ok := la.(*net.TCPAddr); ok && ta.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// hostListed reports whether a Host is named by AllowedHosts.
func (h *httpAPI) hostListed(hostport string) bool {
	return h.allowedHosts["*"] || h.allowedHosts[hostOnly(hostport)]
}

// hostOnly is a Host header's host in lower case, without port, brackets
// or trailing dot.
func hostOnly(hostport string) string {
	host := hostport
	if hh, _, err := net.SplitHostPort(hostport); err == nil {
		host = hh
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// bodyDeadline gives a request with a body BodyTimeout to send all of it:
// the connection's read deadline is set now and cleared when the body has
// been read to its end (so that a long-poll that follows can see its
// client go away). A body still unread when the handler answers is then
// discarded by net/http under the same deadline, not forever.
func (h *httpAPI) bodyDeadline(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(h.bodyTimeout)) != nil {
		return
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, m: h.metrics}
}

type deadlineBody struct {
	io.ReadCloser
	rc *http.ResponseController
	m  *Metrics

	once sync.Once
	done bool // read to its end
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF && !b.done:
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case err != nil && isTimeout(err):
		b.once.Do(b.m.bodyTimeout)
	}
	return n, err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
