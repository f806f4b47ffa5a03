package abuse

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/proctest"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/wire/resp"
)

// The rest of issue 15's findings: secrets of store URLs in logs, errors
// and pages (TestR11Secrets), TLS 1.2 suites and HSTS (TestR11TLS), the
// inline-line limit against what docs/protocol.md states
// (TestR11InlineLimit) and failed AUTHs logged at a bounded rate
// (TestR11AuthLog). Each runs the leasehold command as a process and reads
// what it prints.

// --- the leasehold command as a process, its output kept ---

// cliProc is a `leasehold ...` process (this test binary, see TestMain).
type cliProc struct {
	cmd  *exec.Cmd
	out  *proctest.Buffer
	done chan struct{}
	code int
}

func startCLI(t *testing.T, args ...string) *cliProc {
	t.Helper()
	cmd, err := verify.CLICommand(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	p := &cliProc{cmd: cmd, out: &proctest.Buffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(p.kill)
	return p
}

func (p *cliProc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

func (p *cliProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// runCLI runs `leasehold args...` to its end and returns what it printed
// and its exit code (-1 if it was still running after bound).
func runCLI(t *testing.T, bound time.Duration, args ...string) (string, int) {
	t.Helper()
	p := startCLI(t, args...)
	select {
	case <-p.done:
		return p.out.String(), p.code
	case <-time.After(bound):
		p.kill()
		return p.out.String(), -1
	}
}

// startServeOut runs `leasehold serve` with extra args on free addresses
// and waits until base+"/readyz" answers 200 through client (base is
// scheme://addr).
func startServeOut(t *testing.T, scheme string, client *http.Client, extra ...string) (p *cliProc, httpAddr, respAddr string) {
	t.Helper()
	httpAddr, respAddr = freeAddr(t), freeAddr(t)
	p = startCLI(t, append([]string{"serve", "--addr", httpAddr, "--resp-addr", respAddr}, extra...)...)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if res, err := client.Get(scheme + "://" + httpAddr + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return p, httpAddr, respAddr
			}
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("leasehold serve %v not ready (exit %d):\n%s", extra, p.code, p.out.String())
		}
	}
}

// --- secrets ---

// leaks returns the secrets (as written, or percent-encoded or decoded)
// that occur in text.
func leaks(text string, secrets []string) []string {
	var out []string
	for _, s := range secrets {
		forms := []string{s, url.QueryEscape(s), url.PathEscape(s)}
		if d, err := url.QueryUnescape(s); err == nil {
			forms = append(forms, d)
		}
		for _, f := range forms {
			if strings.Contains(text, f) {
				out = append(out, f)
				break
			}
		}
	}
	return out
}

// cutProxy forwards TCP connections to target until cut, after which its
// connections are closed and new ones refused: a store that goes away.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutProxy{ln: ln, target: target}
	t.Cleanup(c.cut)
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.DialTimeout("tcp", target, 10*time.Second)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	return c
}

func (c *cutProxy) addr() string { return c.ln.Addr().String() }

func (c *cutProxy) cut() {
	c.ln.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nc := range c.conns {
		nc.Close()
	}
	c.conns = nil
}

// secretStore is a store URL that carries secrets.
type secretStore struct {
	name    string
	url     string
	secrets []string
	cut     func() // makes the store unreachable (running cases)
}

// Secrets: the store URL's secrets must not appear in anything the
// server or the CLI prints or serves, also when the store fails.
func TestR11Secrets(t *testing.T) {
	t.Run("running-proxy", func(t *testing.T) {
		var cases []secretStore
		// A server in front of another server (the documented form: the
		// token in the query), through a link the case cuts later.
		up := startServeProc(t, true)
		fwd := newCutProxy(t, up.resp)
		cases = append(cases, secretStore{name: "leasehold", cut: fwd.cut, secrets: []string{adminToken},
			url: "leasehold://" + fwd.addr() + "?token=" + adminToken + "&timeout=3s"})
		if pg := os.Getenv("LEASEHOLD_TEST_POSTGRES"); pg != "" {
			u, err := url.Parse(pg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err = stores.Init(ctx, pg)
			cancel()
			if err != nil {
				t.Fatalf("init %s: %v", u.Redacted(), err)
			}
			fwd := newCutProxy(t, u.Host)
			// The engines' PostgreSQL trusts loopback: the password is
			// sent and ignored. Its '/' is written %2F.
			secret := "pg-S3cret/r11x"
			u.Host, u.User = fwd.addr(), url.UserPassword(u.User.Username(), secret)
			cases = append(cases, secretStore{name: "postgres", url: u.String(), secrets: []string{secret}, cut: fwd.cut})
		} else {
			t.Log("no $LEASEHOLD_TEST_POSTGRES: the postgres:// proxy is left out (source the engines' env)")
		}
		if r := os.Getenv("LEASEHOLD_TEST_REDIS"); r != "" {
			u, err := url.Parse(r)
			if err != nil {
				t.Fatal(err)
			}
			// The engines' Redis has no password: its default user takes
			// any.
			fwd := newCutProxy(t, u.Host)
			secret := "redis-S3cret-r11y"
			u.Host, u.User = fwd.addr(), url.UserPassword("", secret)
			cases = append(cases, secretStore{name: "redis", url: u.String(), secrets: []string{secret}, cut: fwd.cut})
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { runningSecrets(t, c) })
		}
	})
	t.Run("unreachable", unreachableSecrets)
}

// runningSecrets serves a proxy in front of c.url (dashboard on, debug
// log), reads every page, cuts the store, reads them again and checks
// nothing printed or served quotes a secret.
func runningSecrets(t *testing.T, c secretStore) {
	client := newClient()
	defer client.CloseIdleConnections()
	p, httpAddr, respAddr := startServeOut(t, "http", client, "--store", c.url, "--log-level", "debug", "--dashboard=true")
	base := "http://" + httpAddr
	var served strings.Builder
	get := func(method, path, body string) int {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		res, err := client.Do(req)
		if err != nil {
			fmt.Fprintf(&served, "%s %s: %v\n", method, path, err)
			return 0
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Fprintf(&served, "%s %s: %d %v\n%s\n", method, path, res.StatusCode, res.Header, b)
		return res.StatusCode
	}
	respCmd := func(args ...string) {
		rc, err := dialRESP(respAddr, "127.0.0.1", "")
		if err != nil {
			fmt.Fprintf(&served, "RESP: %v\n", err)
			return
		}
		defer rc.nc.Close()
		v, err := rc.do(args...)
		fmt.Fprintf(&served, "RESP %v: %c %s %v\n", args, v.Type, v.Str, err)
	}
	pages := func() {
		for _, path := range []string{"/healthz", "/readyz", "/v1/stats", "/metrics", "/dashboard/", "/v1/leases", "/v1/leases/r11-secrets/a"} {
			get("GET", path, "")
		}
		get("POST", "/v1/leases/r11-secrets/a/acquire", `{"owner":"r11","ttl_ms":5000}`)
		get("POST", "/v1/leases/r11-secrets/a/release", `{"owner":"r11","token":1}`)
		respCmd("LH.ACQUIRE", "r11-secrets/b", "r11", "5000")
		respCmd("LH.GET", "r11-secrets/b")
		respCmd("INFO")
	}
	pages()
	okBefore := get("GET", "/readyz", "")
	c.cut()
	pages()
	// The store is gone: readiness fails within its 5 s bound.
	okAfter := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if okAfter = get("GET", "/readyz", ""); okAfter != 200 {
			break
		}
	}
	pages()
	time.Sleep(500 * time.Millisecond) // the last log lines
	p.kill()
	out := p.out.String()
	violations := 0
	if l := leaks(out, c.secrets); len(l) > 0 {
		violations++
		t.Errorf("the server's output shows %q:\n%s", l, excerpt(out, l[0]))
	}
	if l := leaks(served.String(), c.secrets); len(l) > 0 {
		violations++
		t.Errorf("the server served %q:\n%s", l, excerpt(served.String(), l[0]))
	}
	if okBefore != 200 || okAfter == 200 {
		violations++
		t.Errorf("/readyz %d with the store, %d without: the store failure was not seen", okBefore, okAfter)
	}
	if !strings.Contains(out, "REDACTED") {
		violations++
		t.Errorf("the start-up line does not name the store (redacted):\n%.2000s", out)
	}
	hdRow(t, "secrets-running-"+c.name, 3*14+2, 1, violations,
		fmt.Sprintf("serve --store %s (debug log, dashboard on): start-up, /healthz /readyz /v1/stats /metrics /dashboard/ and API answers over HTTP and RESP before and after the store was cut (/readyz %d→%d), %d bytes of log: secret shown %v",
			redact.URL(c.url), okBefore, okAfter, len(out), violations > 0))
}

// excerpt is the text around the first occurrence of s.
func excerpt(text, s string) string {
	i := strings.Index(text, s)
	lo, hi := max(0, i-300), min(len(text), i+len(s)+300)
	return text[lo:hi]
}

// unreachableSecrets: serve, status and run with stores that refuse the
// connection, never answer, or reject the URL: the error is printed, its
// secrets are not.
func unreachableSecrets(t *testing.T) {
	closed := freeAddr(t) // nothing listens there
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() { // accepts and never answers
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	const (
		tok  = "tok-S3cret-r11a"
		pw   = "pw-S3cret-r11b"
		awsK = "awsSecretR11cKEY+/x"
		awsS = "awsSessionR11dTOKEN"
	)
	cases := []secretStore{
		{name: "leasehold-refused", url: "leasehold://" + closed + "?token=" + tok, secrets: []string{tok}},
		{name: "leasehold-silent", url: "leasehold://" + silent.Addr().String() + "?token=" + tok + "&connect_timeout=2s", secrets: []string{tok}},
		{name: "http-refused", url: "http://" + closed + "/?token=" + tok, secrets: []string{tok}},
		{name: "postgres-refused", url: "postgres://app:" + pw + "@" + closed + "/app?sslmode=disable", secrets: []string{pw}},
		{name: "postgres-silent", url: "postgres://app:" + pw + "@" + silent.Addr().String() + "/app?sslmode=disable&connect_timeout=2s", secrets: []string{pw}},
		{name: "redis-refused", url: "redis://:" + pw + "@" + closed + "/0", secrets: []string{pw}},
		{name: "dynamodb-keys", url: "dynamodb://r11table?endpoint=http://" + closed + "&region=us-east-1&aws_access_key_id=AKIAR11EXAMPLE&aws_secret_access_key=" + url.QueryEscape(awsK) + "&aws_session_token=" + awsS,
			secrets: []string{awsK, awsS}},
		{name: "etcd-refused", url: "etcd://root:" + pw + "@" + closed + "?password=" + pw + "&connect_timeout=2s", secrets: []string{pw}},
	}
	runs, violations, printed := 0, 0, 0
	for _, c := range cases {
		runs++
		out, failed := serveUnreachable(t, c.url)
		if !failed {
			violations++
			t.Errorf("%s: leasehold serve neither failed nor reported the store not ready:\n%s", c.name, out)
		}
		if l := leaks(out, c.secrets); len(l) > 0 {
			violations++
			t.Errorf("%s: leasehold serve shows %q:\n%s", c.name, l, excerpt(out, l[0]))
		}
		if strings.TrimSpace(out) != "" {
			printed++
		}
		for _, args := range [][]string{
			{"status", "--store", c.url},
			// -w 2: without a wait, run tries an unreachable store
			// until it answers; with one it gives up (75) naming the
			// last error, which is what this row reads.
			{"run", "--store", c.url, "--ttl", "5s", "-w", "2", "r11-secrets/run", "--", "true"},
		} {
			runs++
			out, code := runCLI(t, 60*time.Second, args...)
			if code == 0 || code == -1 {
				violations++
				t.Errorf("%s: leasehold %s: exit %d, want a failure:\n%s", c.name, args[0], code, out)
			}
			if l := leaks(out, c.secrets); len(l) > 0 {
				violations++
				t.Errorf("%s: leasehold %s shows %q:\n%s", c.name, args[0], l, out)
			}
			if strings.TrimSpace(out) != "" {
				printed++
			} else {
				t.Errorf("%s: leasehold %s printed no error", c.name, args[0])
				violations++
			}
		}
	}
	hdRow(t, "secrets-unreachable", runs, runs, violations,
		fmt.Sprintf("serve, status and run against %d store URLs with a token, password or AWS keys whose store refuses, never answers or rejects the URL: %d runs printed an error; violations (a secret shown, nothing printed, exit 0 or a server ready without its store): %d", len(cases), printed, violations))
}

// serveUnreachable runs `leasehold serve --store raw` (debug log). A
// server that stays up (remote stores connect lazily) must answer /readyz
// 503; its pages are read and returned with its output. failed says
// whether it exited non-zero or was not ready.
func serveUnreachable(t *testing.T, raw string) (string, bool) {
	t.Helper()
	httpAddr := freeAddr(t)
	p := startCLI(t, "serve", "--addr", httpAddr, "--resp-addr", freeAddr(t), "--store", raw, "--log-level", "debug")
	defer p.kill()
	client := newClient()
	defer client.CloseIdleConnections()
	var served strings.Builder
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if p.exited() {
			return p.out.String(), p.code != 0
		}
		res, err := client.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			continue
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		ready := res.StatusCode
		for _, path := range []string{"/readyz", "/healthz", "/v1/stats", "/metrics", "/dashboard/", "/v1/leases"} {
			if res, err := client.Get("http://" + httpAddr + path); err == nil {
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				fmt.Fprintf(&served, "GET %s: %d\n%s\n", path, res.StatusCode, b)
			}
		}
		time.Sleep(300 * time.Millisecond)
		return p.out.String() + served.String(), ready != 200
	}
	return p.out.String(), false
}

// --- TLS ---

// selfSigned writes a self-signed certificate for 127.0.0.1 with an
// ECDSA or RSA key, and returns the files and a pool trusting it.
func selfSigned(t *testing.T, rsaKey bool) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	var key any
	var pub any
	if rsaKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		key, pub = k, &k.PublicKey
	} else {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		key, pub = k, &k.PublicKey
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "r11"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// cbcSuites are every TLS 1.2 CBC suite crypto/tls implements.
var cbcSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256,
	tls.TLS_RSA_WITH_AES_128_CBC_SHA, tls.TLS_RSA_WITH_AES_256_CBC_SHA, tls.TLS_RSA_WITH_AES_128_CBC_SHA256,
	tls.TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA, tls.TLS_RSA_WITH_3DES_EDE_CBC_SHA,
}

// aeadSuites are the TLS 1.2 AEAD suites of each key type.
var aeadSuites = map[bool][]uint16{
	false: {tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256},
	true:  {tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256},
}

// TLS: with --tls-cert, TLS 1.2 clients that offer only CBC suites are
// refused on both ports, each AEAD suite (and TLS 1.3) is served, and
// every HTTPS answer carries Strict-Transport-Security.
func TestR11TLS(t *testing.T) {
	for _, rsaKey := range []bool{false, true} {
		kind := map[bool]string{false: "ecdsa", true: "rsa"}[rsaKey]
		t.Run(kind, func(t *testing.T) {
			certFile, keyFile, pool := selfSigned(t, rsaKey)
			client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
			defer client.CloseIdleConnections()
			_, httpAddr, respAddr := startServeOut(t, "https", client, "--tls-cert", certFile, "--tls-key", keyFile,
				"--log-level", "error", "--data-dir", filepath.Join(t.TempDir(), "data"))
			handshakes, violations := 0, 0
			var notes []string
			// dial handshakes with max TLS 1.2 (unless tls13) and suites.
			dial := func(addr string, suites []uint16, tls13 bool) (*tls.Conn, error) {
				cfg := &tls.Config{RootCAs: pool, CipherSuites: suites, MaxVersion: tls.VersionTLS12}
				if tls13 {
					cfg.MaxVersion = 0
				}
				handshakes++
				d := &net.Dialer{Timeout: 30 * time.Second}
				return tls.DialWithDialer(d, "tcp", addr, cfg)
			}
			for _, port := range []struct{ name, addr string }{{"HTTP", httpAddr}, {"RESP", respAddr}} {
				// CBC only: refused.
				cbc := "CBC-only refused"
				if c, err := dial(port.addr, cbcSuites, false); err == nil {
					cbc = "CBC-only SERVED " + tls.CipherSuiteName(c.ConnectionState().CipherSuite)
					violations++
					t.Errorf("%s port: a TLS 1.2 client offering only CBC suites was served %s", port.name, tls.CipherSuiteName(c.ConnectionState().CipherSuite))
					c.Close()
				}
				// Each AEAD suite, and TLS 1.3: served, and they work.
				served := 0
				for i, s := range append(aeadSuites[rsaKey], 0) {
					tls13 := s == 0
					var suites []uint16
					if !tls13 {
						suites = []uint16{s}
					}
					c, err := dial(port.addr, suites, tls13)
					if err != nil {
						violations++
						t.Errorf("%s port: suite %s refused: %v", port.name, tls.CipherSuiteName(s), err)
						continue
					}
					st := c.ConnectionState()
					if !tls13 && (st.Version != tls.VersionTLS12 || st.CipherSuite != s) {
						violations++
						t.Errorf("%s port: offered %s, got %s (version %x)", port.name, tls.CipherSuiteName(s), tls.CipherSuiteName(st.CipherSuite), st.Version)
					}
					if tls13 && st.Version != tls.VersionTLS13 {
						violations++
						t.Errorf("%s port: a TLS 1.3 client got version %x", port.name, st.Version)
					}
					if !tlsWorks(c, port.name, i) {
						violations++
						t.Errorf("%s port: no answer over %s", port.name, tls.CipherSuiteName(st.CipherSuite))
					} else {
						served++
					}
					c.Close()
				}
				notes = append(notes, fmt.Sprintf("%s: %s, %d/%d AEAD+1.3 served", port.name, cbc, served, len(aeadSuites[rsaKey])+1))
			}
			// HSTS on every kind of answer.
			paths := []struct{ method, path string }{{"GET", "/healthz"}, {"GET", "/readyz"}, {"GET", "/v1/leases"},
				{"GET", "/v1/leases/r11/none"}, {"GET", "/metrics"}, {"GET", "/nope"}, {"POST", "/v1/leases/r11/x/acquire"}}
			hsts := 0
			for _, pth := range paths {
				req, _ := http.NewRequest(pth.method, "https://"+httpAddr+pth.path, strings.NewReader("{"))
				res, err := client.Do(req)
				if err != nil {
					violations++
					t.Errorf("%s %s: %v", pth.method, pth.path, err)
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if v := res.Header.Get("Strict-Transport-Security"); !strings.HasPrefix(v, "max-age=") || v == "max-age=0" {
					violations++
					t.Errorf("%s %s (%d): Strict-Transport-Security %q", pth.method, pth.path, res.StatusCode, v)
				} else {
					hsts++
				}
			}
			hdRow(t, "tls-"+kind, handshakes+len(paths), 2, violations,
				fmt.Sprintf("serve --tls-cert (%s key): %s; Strict-Transport-Security on %d/%d HTTPS answers (200, 404 and 400 ones)",
					kind, strings.Join(notes, "; "), hsts, len(paths)))
		})
	}
}

// tlsWorks sends one request over c (GET /healthz or PING) and checks
// the answer.
func tlsWorks(c *tls.Conn, port string, i int) bool {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if port == "HTTP" {
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
		b, _ := io.ReadAll(c)
		return strings.HasPrefix(string(b), "HTTP/1.1 200 ")
	}
	msg := "r11-tls-" + strconv.Itoa(i)
	c.Write(resp.AppendCommand(nil, "PING", msg))
	v, err := resp.NewReader(bufio.NewReader(c)).ReadValue()
	return err == nil && string(v.Str) == msg
}

// --- inline commands ---

// docInlineLimit reads the inline-line limit docs/protocol.md states
// ("an inline line over 16 KiB") and checks docs/server.md states the
// same ("inline line ≤ 16 KiB").
func docInlineLimit(t *testing.T) int {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(string(b)), " ")
	}
	m := regexp.MustCompile(`an inline line over (\d+) KiB`).FindStringSubmatch(read("protocol.md"))
	if m == nil {
		t.Fatal(`docs/protocol.md does not state the inline limit ("an inline line over N KiB")`)
	}
	kib, _ := strconv.Atoi(m[1])
	s := regexp.MustCompile(`≤ 1,024 arguments, inline line ≤ (\d+) KiB`).FindStringSubmatch(read("server.md"))
	if s == nil || s[1] != m[1] {
		t.Fatalf("docs/server.md's hardening table states the inline limit as %v, docs/protocol.md as %s KiB", s, m[1])
	}
	return kib << 10
}

// InlineLimit: an inline command line of exactly the documented limit is
// run; one byte more gets -ERR Protocol error naming the limit and the
// connection is closed (as docs/protocol.md says); the server serves on.
func TestR11InlineLimit(t *testing.T) {
	limit := docInlineLimit(t)
	p := startServeProc(t, false)
	violations := 0
	line := func(n int) string { // "PING aaa…" of n bytes
		return "PING " + strings.Repeat("a", n-5)
	}
	for _, n := range []int{limit - 100, limit - 1, limit} {
		c, err := dialRESP(p.resp, "127.0.0.1", "")
		if err != nil {
			t.Fatal(err)
		}
		c.nc.SetDeadline(time.Now().Add(30 * time.Second))
		io.WriteString(c.nc, line(n)+"\r\n")
		v, err := c.rd.ReadValue()
		if err != nil || len(v.Str) != n-5 {
			violations++
			t.Errorf("an inline line of %d bytes (documented limit %d): %c%.100s %v", n, limit, v.Type, v.Str, err)
		}
		c.nc.Close()
	}
	var refusals []string
	for _, n := range []int{limit + 1, limit + 2, 2 * limit} {
		c, err := dialRESP(p.resp, "127.0.0.1", "")
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c.nc, line(n)+"\r\nPING after\r\n")
		got, closed := readAll(c.nc, 30*time.Second)
		c.nc.Close()
		want := "-ERR Protocol error: "
		if !strings.HasPrefix(got, want) || !strings.Contains(got, strconv.Itoa(limit)+" bytes") || strings.Contains(got, "after") || !closed {
			violations++
			t.Errorf("an inline line of %d bytes (documented limit %d): got %.200q, closed %v; want %q… naming %d bytes, then the connection closed",
				n, limit, got, closed, want, limit)
		}
		refusals = append(refusals, strings.TrimSpace(got))
	}
	c, err := dialRESP(p.resp, "127.0.0.1", "")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.do("PING"); err != nil || v.Str == nil {
		violations++
		t.Errorf("PING after the refusals: %v %v", v, err)
	}
	c.nc.Close()
	hdRow(t, "resp-inline-limit", 7, 3, violations,
		fmt.Sprintf("docs state %d bytes (protocol.md and server.md agree): inline lines of %d, %d and %d bytes run; %d, %d and %d bytes refused (%q) with the connection closed",
			limit, limit-100, limit-1, limit, limit+1, limit+2, 2*limit, refusals[0]))
}

// --- failed AUTHs in the log ---

// AuthLog: 2,000 wrong AUTHs from 50 addresses over 3 s (some 650 of
// them checked, the rest rate-limited) make at most one log line a second.
func TestR11AuthLog(t *testing.T) {
	client := newClient()
	defer client.CloseIdleConnections()
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.json")
	os.WriteFile(file, []byte(fmt.Sprintf(`{"tokens":[{"identity":"admin","token":%q,"grants":[{"prefix":"","access":"admin"}]}]}`, adminToken)), 0o600)
	p, _, respAddr := startServeOut(t, "http", client, "--auth-file", file, "--log-level", "warn",
		"--data-dir", filepath.Join(dir, "data"))
	const addrs, perAddr, pace = 50, 40, 75 * time.Millisecond
	countLines := func() int { return strings.Count(p.out.String(), "authentication failed") }
	before := countLines()
	start := time.Now()
	counts := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := 0
	for a := 0; a < addrs; a++ {
		wg.Add(1)
		go func(a int) {
			defer wg.Done()
			c, err := dialRESP(respAddr, fmt.Sprintf("127.0.1.%d", 10+a), "")
			if err != nil {
				mu.Lock()
				errs++
				mu.Unlock()
				return
			}
			defer c.nc.Close()
			for i := 0; i < perAddr; i++ {
				v, err := c.do("AUTH", fmt.Sprintf("guess-%d-%d", a, i))
				mu.Lock()
				if err != nil {
					errs++
				} else {
					code, _, _ := strings.Cut(string(v.Str), " ")
					counts[code]++
				}
				mu.Unlock()
				if err != nil {
					return
				}
				time.Sleep(pace)
			}
		}(a)
	}
	wg.Wait()
	elapsed := time.Since(start)
	time.Sleep(1500 * time.Millisecond) // a line the limiter let through last
	lines := countLines() - before
	violations := 0
	bound := int(elapsed.Seconds()) + 3 // one a second, and the first, and the one after the sleep
	if lines > bound || lines == 0 || errs > 0 || counts["WRONGPASS"] < addrs {
		violations++
		t.Errorf("%d wrong AUTHs in %v (%v, %d errors): %d log lines, want 1 to %d", addrs*perAddr, elapsed, counts, errs, lines, bound)
	}
	hdRow(t, "resp-auth-log", addrs*perAddr, addrs*perAddr, violations,
		fmt.Sprintf("%d wrong AUTHs from %d addresses in %s (%d checked WRONGPASS, %d RATELIMITED): %d 'authentication failed' log lines (bound %d)",
			addrs*perAddr, addrs, round(elapsed), counts["WRONGPASS"], counts["RATELIMITED"], lines, bound))
}
