package server

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"github.com/leasehold/leasehold/testrig/servertest"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHTTPAllowedHosts: with auth off, only loopback Host names, the
// server's own address and AllowedHosts are served (DNS rebinding); other
// Hosts get 421 and change nothing. With auth on, any Host is served.
func TestHTTPAllowedHosts(t *testing.T) {
	body := `{"owner":"x","ttl_ms":60000}`
	ts := newHTServer(t, HandlerOptions{})
	for _, host := range []string{"rebind.example", "rebind.example:7070", "localhost.evil.example", "10.9.8.7:7070", "127.0.0.1.nip.io"} {
		ts.want(ts.do("POST", "/v1/leases/r/acquire", "", body, "Host", host), 421, "misdirected-host")
		ts.want(ts.do("GET", "/v1/leases", "", "", "Host", host), 421, "misdirected-host")
		ts.want(ts.do("GET", "/healthz", "", "", "Host", host), 421, "misdirected-host")
	}
	if n := ts.names(); len(n) != 0 {
		t.Fatalf("refused Hosts changed the state: %v", n)
	}
	for i, host := range []string{"localhost", "LOCALHOST:1", "localhost.:7070", "app.localhost:7070", "127.0.0.1", "127.0.0.2:7070", "[::1]:7070", "[::1]"} {
		ts.want(ts.do("POST", fmt.Sprintf("/v1/leases/l%d/acquire", i), "", body, "Host", host), 200, "")
	}
	if n := ts.names(); len(n) != 8 {
		t.Errorf("loopback Hosts: %d leases, want 8: %v", len(n), n)
	}

	listed := newHTServer(t, HandlerOptions{AllowedHosts: []string{"leases.internal"}})
	listed.want(listed.do("POST", "/v1/leases/a/acquire", "", body, "Host", "leases.internal:7070"), 200, "")
	listed.want(listed.do("POST", "/v1/leases/b/acquire", "", body, "Host", "LEASES.INTERNAL", "Sec-Fetch-Site", "same-origin"), 200, "")
	listed.want(listed.do("GET", "/v1/leases", "", "", "Host", "other.internal"), 421, "misdirected-host")
	any := newHTServer(t, HandlerOptions{AllowedHosts: []string{"*"}})
	any.want(any.do("GET", "/v1/leases", "", "", "Host", "other.internal"), 200, "")

	authed := newHTServer(t, HandlerOptions{Auth: htAuth(t)})
	authed.want(authed.do("GET", "/healthz", "", "", "Host", "leases.example"), 200, "")
}

// TestHTTPBodyDeadline: a request body sent a byte at a time is cut at
// BodyTimeout, whether the handler reads it (a token) or not (no token);
// a long-poll that read its body in time is not cut.
func TestHTTPBodyDeadline(t *testing.T) {
	const timeout = 500 * time.Millisecond
	m := NewMetrics(nil)
	eng := rtEngine(t)
	srv := httptest.NewServer(NewHandler(eng, HandlerOptions{Auth: rtAuth(t), BodyTimeout: timeout, Metrics: m}))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	for _, token := range []string{"team-token", ""} {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		head := "POST /v1/leases/team/slow/acquire HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
		if token != "" {
			head += "Authorization: Bearer " + token + "\r\n"
		}
		io.WriteString(nc, head+"\r\n")
		start := time.Now()
		done := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(nc) // until the server closes
			done <- string(b)
		}()
		var answer string
	drip:
		for i := 0; ; i++ {
			select {
			case answer = <-done:
				break drip
			case <-time.After(100 * time.Millisecond):
			}
			if time.Since(start) > 60*time.Second {
				t.Fatalf("token %q: the slow body still held the connection after 60s", token)
			}
			nc.Write([]byte{' '})
		}
		nc.Close()
		if d := time.Since(start); d < timeout {
			t.Errorf("token %q: cut after %v, before the deadline", token, d)
		}
		want := "HTTP/1.1 400"
		if token == "" {
			want = "HTTP/1.1 401"
		}
		if !strings.HasPrefix(answer, want) {
			t.Errorf("token %q: answered %.60q, want %q", token, answer, want)
		}
	}
	if _, err := eng.Get(t.Context(), "team/slow"); err == nil {
		t.Error("a slow body took the lease")
	}
	if n := hdValue(t, m.bodyTimeouts); n != 1 { // the handler read only the body that came with a token
		t.Errorf("leasehold_http_body_timeouts_total = %v, want 1", n)
	}

	// A waiting acquire whose body came in time waits longer than the
	// body deadline.
	mustAcquire(t, eng, "team/held")
	req, _ := http.NewRequest("POST", srv.URL+"/v1/leases/team/held/acquire", strings.NewReader(`{"owner":"w","ttl_ms":60000,"wait_ms":1500}`))
	req.Header.Set("Authorization", "Bearer team-token")
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusConflict || time.Since(start) < 1500*time.Millisecond {
		t.Errorf("long-poll: %d after %v, want 409 after its 1.5s wait", res.StatusCode, time.Since(start))
	}
	// A keep-alive connection goes on serving after a body in time.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	for i := 0; i < 2; i++ {
		b := `{"owner":"k","ttl_ms":60000}`
		fmt.Fprintf(nc, "POST /v1/leases/team/k%d/acquire HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer team-token\r\nContent-Length: %d\r\n\r\n%s", i, addr, len(b), b)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("keep-alive request %d: %v", i, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Errorf("keep-alive request %d: %d", i, res.StatusCode)
		}
		time.Sleep(2 * timeout) // idle past the body deadline
	}
}

// TestTLSHardening: with TLS, TLS 1.2 offers AEAD suites only (a CBC-only
// client is refused) on both ports, and HTTP answers carry HSTS.
func TestTLSHardening(t *testing.T) {
	p := servertest.NewPKI(t)
	srv, _ := startServe(t, rtEngine(t), Config{RESPAddr: "127.0.0.1:0", TLSCert: p.CertFile, TLSKey: p.KeyFile})
	for _, addr := range []string{srv.HTTPAddr().String(), srv.RESPAddr().String()} {
		cbc := &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256}}
		if c, err := tls.Dial("tcp", addr, cbc); err == nil {
			c.Close()
			t.Errorf("%s: a TLS 1.2 CBC-only client was served", addr)
		}
		gcm := &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}
		c, err := tls.Dial("tcp", addr, gcm)
		if err != nil {
			t.Errorf("%s: TLS 1.2 with AES-GCM: %v", addr, err)
			continue
		}
		c.Close()
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	res, err := client.Get("https://" + srv.HTTPAddr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := res.Header.Get("Strict-Transport-Security"); got != "max-age=31536000" {
		t.Errorf("Strict-Transport-Security = %q", got)
	}
}

// TestHTTPConnCaps: HTTP connections over the per-address or the total
// cap get a 503 and are closed; closing one frees its place.
func TestHTTPConnCaps(t *testing.T) {
	m := NewMetrics(nil)
	srv, _ := startServe(t, rtEngine(t), Config{Metrics: m, HTTPMaxConns: 4, HTTPMaxConnsPerAddr: 2, ReadHeaderTimeout: time.Minute})
	addr := srv.HTTPAddr().String()
	health := func(nc net.Conn) int {
		nc.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(nc, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(nc), nil)
		if err != nil {
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	refused := func(src string) {
		t.Helper()
		closed, got := hdClosed(hdDialFrom(t, src, addr), 30*time.Second)
		if !closed || !strings.HasPrefix(got, "HTTP/1.1 503") {
			t.Errorf("connection from %s over a cap: closed %v, answer %.40q", src, closed, got)
		}
	}
	a1, a2 := hdDialFrom(t, "127.0.0.1", addr), hdDialFrom(t, "127.0.0.1", addr)
	for _, nc := range []net.Conn{a1, a2} {
		if code := health(nc); code != 200 {
			t.Fatalf("within the caps: %d", code)
		}
	}
	refused("127.0.0.1")
	for _, nc := range []net.Conn{hdDialFrom(t, "127.0.0.2", addr), hdDialFrom(t, "127.0.0.2", addr)} {
		if code := health(nc); code != 200 {
			t.Fatalf("from another address: %d", code)
		}
	}
	refused("127.0.0.3")
	for reason, want := range map[string]float64{closeMaxPerAddr: 1, closeMaxConns: 1} {
		if n := hdValue(t, m.httpRefusedBy.WithLabelValues(reason)); n != want {
			t.Errorf("refused for %s: %v, want %v", reason, n, want)
		}
	}
	a1.Close()
	servertest.WaitFor(t, "a place to be freed", func() bool {
		nc := hdDialFrom(t, "127.0.0.1", addr)
		defer nc.Close()
		return health(nc) == 200
	})
}

// TestHTTPRecordBodyDeadline: a PUT of a record whose body stops short of
// its Content-Length (60,000 announced, 10 sent, then nothing) is answered
// and its connection closed once BodyTimeout has passed. Before the fix
// readValue replaced the body deadline with a fixed 30 s and then cleared
// it, and net/http drained the rest of the body without any deadline: the
// request was never answered (open after 170 s).
func TestHTTPRecordBodyDeadline(t *testing.T) {
	const timeout = 500 * time.Millisecond
	eng := rtEngine(t)
	srv := httptest.NewServer(NewHandler(eng, HandlerOptions{BodyTimeout: timeout}))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	start := time.Now()
	io.WriteString(nc, "PUT /v1/records/slow/value HTTP/1.1\r\nHost: "+addr+"\r\nContent-Type: application/octet-stream\r\nIf-None-Match: *\r\nContent-Length: 60000\r\n\r\n0123456789")
	nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(nc) // until the server closes
	if err != nil {
		t.Fatalf("no answer and no close within 20s (BodyTimeout %s): %v; got %.80q", timeout, err, b)
	}
	if d := time.Since(start); d < timeout {
		t.Errorf("cut after %v, before the body deadline", d)
	}
	if !strings.HasPrefix(string(b), "HTTP/1.1 400") {
		t.Errorf("answered %.80q, want a 400", b)
	}
	if _, err := eng.(*Engine).GetRecord(t.Context(), "slow/value"); err == nil {
		t.Error("a short body wrote the record")
	}
}

// TestHTTPWriteTimeout: a client that asks for a large answer and never
// reads it is disconnected at WriteTimeout and the answer dropped (before,
// 40 unread 13 MB lists held 650 MB for 75 s and more); a keep-alive
// connection's next request is not cut by the previous one's deadline.
// The server's side is watched (its connection state), not the client's:
// what the kernels had buffered does not matter.
func TestHTTPWriteTimeout(t *testing.T) {
	const timeout = 500 * time.Millisecond
	eng := rtEngine(t)
	data := strings.Repeat("d", 60<<10)
	for i := 0; i < 200; i++ { // a list of about 16 MB in JSON (base64 data)
		var req AcquireRequest
		req.Name, req.Owner, req.TTL, req.Data = fmt.Sprintf("big/%03d", i), "o", time.Hour, []byte(data)
		if _, err := eng.Acquire(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewUnstartedServer(NewHandler(eng, HandlerOptions{WriteTimeout: timeout}))
	closed := make(chan struct{}, 16)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	io.WriteString(nc, "GET /v1/leases?prefix=big/ HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	// Read nothing: 16 MB is more than the two sockets' buffers hold, so
	// the server's write blocks until its deadline.
	select {
	case <-closed:
	case <-time.After(60 * time.Second):
		t.Fatal("the server still held the connection of a client that does not read, 60s after a 500ms write timeout")
	}
	// Keep-alive: an answer, a pause longer than the write timeout, and a
	// second answer on the same connection.
	c := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	for i := 0; i < 2; i++ {
		res, err := c.Get(srv.URL + "/v1/leases/big/000")
		if err != nil {
			t.Fatalf("request %d on a kept-alive connection: %v", i+1, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("request %d: %d", i+1, res.StatusCode)
		}
		time.Sleep(2 * timeout)
	}
}
