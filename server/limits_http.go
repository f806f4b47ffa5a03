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

func httpUnsafe(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// httpFromBrowser reports whether a browser sent r (browsers send Origin
// or Sec-Fetch-Site with state-changing requests; other clients do not).
func httpFromBrowser(r *http.Request) bool {
	return r.Header.Get("Sec-Fetch-Site") != "" || r.Header.Get("Origin") != ""
}

// httpLocalHost reports whether a Host header is an IP address or
// localhost.
func httpLocalHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return net.ParseIP(host) != nil || strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost")
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

// Defaults of the HTTP port's connection caps (Config.HTTPMaxConns and
// HTTPMaxConnsPerAddr).
const (
	DefaultHTTPMaxConns        = 10000
	DefaultHTTPMaxConnsPerAddr = 1000
)

// capListener accepts at most max connections at once, and at most
// perAddr from one client IP; a connection over a cap is closed at once
// (plain HTTP gets a 503 first). Its Accept never fails for that.
type capListener struct {
	net.Listener
	max, perAddr int
	plain        bool // not TLS: a refusal can be answered
	metrics      *Metrics

	mu     sync.Mutex
	open   int
	byAddr map[string]int
}

func newCapListener(ln net.Listener, max, perAddr int, plain bool, m *Metrics) *capListener {
	return &capListener{Listener: ln, max: max, perAddr: perAddr, plain: plain, metrics: m, byAddr: map[string]int{}}
}

const httpRefusedAnswer = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 36\r\n\r\ntoo many connections; try again soon\n"

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := addrKey(c.RemoteAddr())
		reason := ""
		l.mu.Lock()
		switch {
		case l.open >= l.max:
			reason = closeMaxConns
		case l.byAddr[addr] >= l.perAddr:
			reason = closeMaxPerAddr
		default:
			l.open++
			l.byAddr[addr]++
		}
		l.mu.Unlock()
		if reason == "" {
			return &capConn{Conn: c, l: l, addr: addr}, nil
		}
		l.metrics.httpRefused(reason)
		if l.plain {
			// A fresh socket's send buffer is empty: this does not block.
			c.SetWriteDeadline(time.Now().Add(time.Second))
			io.WriteString(c, httpRefusedAnswer)
		}
		c.Close()
	}
}

// capConn gives its place back when closed.
type capConn struct {
	net.Conn
	l    *capListener
	addr string
	once sync.Once
}

func (c *capConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		if c.l.byAddr[c.addr]--; c.l.byAddr[c.addr] <= 0 {
			delete(c.l.byAddr, c.addr)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
