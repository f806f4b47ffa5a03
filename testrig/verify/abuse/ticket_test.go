package abuse

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/testrig/enginetest"
)

// Issue 26, item 1: a TLS session ticket that holds RESP command lines.
// A page first talks to the attacker's TLS server, which hands the browser
// a session ticket whose bytes are ticketPayload; the page's host name is
// then rebound to the RESP port, and the browser's next ClientHello to that
// host and port offers the ticket as it is. Before the fix the RESP port
// read the ClientHello as inline lines, skipped the binary ones as unknown
// commands and ran the ticket's.

// ticketPayload is the session ticket the attacker's TLS server issues.
const ticketPayload = "\r\nLH.ACQUIRE victim evil 60000\r\nLH.FORCERELEASE adminlease\r\n"

// foreignClosed is the close counter of connections that spoke another
// protocol before their first known command.
const foreignClosed = `leasehold_resp_connections_closed_total{reason="foreign_protocol"}`

// evilCert is a self-signed certificate for evil.test and its key.
func evilCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(26),
		Subject:      pkix.Name{CommonName: "evil.test"},
		DNSNames:     []string{"evil.test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// ticketOutcome is what one try saw.
type ticketOutcome struct {
	issued, offered int64   // tickets the TLS server issued; ClientHellos that offered ticketPayload to it
	pings           int64   // the page's fetches the TLS server answered
	victim          bool    // the lease victim exists (LH.ACQUIRE ran)
	released        bool    // adminlease is gone or has another token (LH.FORCERELEASE ran)
	foreign         float64 // connections the RESP port closed as foreign_protocol
	rebound         bool    // `leasehold serve` took the port
	took            time.Duration
}

func (o ticketOutcome) ran() bool { return o.victim || o.released }

// TestR11TLSTicketRebinding is the attack of issue 26 item 1 as made, in
// headless Chromium: each try loads a page from a throwaway TLS server on
// a loopback port (evil.test, mapped to 127.0.0.1) that issues the session
// ticket ticketPayload; once Chromium offers that ticket back, the TLS
// server goes and `leasehold serve` (auth off, the default) takes the same
// port as its RESP port, as DNS rebinding would have it, while the page
// keeps fetching. No try may run the ticket's commands (the lease victim
// must not exist, adminlease must keep its holder), and the RESP port must
// have seen the browser's ClientHello (closed as foreign_protocol).
func TestR11TLSTicketRebinding(t *testing.T) {
	chrome := enginetest.Chromium(t)
	tries := 20
	cert := evilCert(t)
	spki := sha256.Sum256(cert.Leaf.RawSubjectPublicKeyInfo)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("host-resolver-rules", "MAP evil.test 127.0.0.1"),
		// Trusted, unlike --ignore-certificate-errors: Chromium caches the
		// sessions of a trusted connection only.
		chromedp.Flag("ignore-certificate-errors-spki-list", base64.StdEncoding.EncodeToString(spki[:])),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(actx)
	defer cancelTab()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chrome, err)
	}

	var c tally
	ran, victims, released, delivered := 0, 0, 0, 0
	var longest time.Duration
	for i := range tries {
		var o ticketOutcome
		ok := t.Run(fmt.Sprintf("try-%02d", i), func(t *testing.T) { ticketTry(t, ctx, cert, &o) })
		c.ops++
		c.faults++
		longest = max(longest, o.took)
		switch {
		case !ok && !o.rebound:
			c.fail("try %d: did not get as far as the rebinding (%d tickets issued, offered back %d times)", i, o.issued, o.offered)
		case o.ran():
			ran++
			if o.victim {
				victims++
			}
			if o.released {
				released++
			}
			c.fail("try %d: the ticket's commands ran (victim taken %v, adminlease released %v)", i, o.victim, o.released)
		case o.foreign == 0:
			c.fail("try %d: the RESP port never saw the browser's ClientHello (ticket offered %d times to the TLS server)", i, o.offered)
		default:
			delivered++
		}
	}
	c.row(t, "resp-tls-ticket-rebinding", fmt.Sprintf(
		"%d tries: headless Chromium got the session ticket %q from a TLS server on a loopback port and offered it back; the port then became the RESP port (auth off); the ticket's commands ran in %d of %d tries (victim taken %d, adminlease released %d); ClientHellos closed as foreign_protocol in %d of %d; longest try %s",
		tries, ticketPayload, ran, tries, victims, released, delivered, tries, round(longest)))
}

// ticketTry is one try of TestR11TLSTicketRebinding on a new loopback port,
// in the tab of ctx; it fills o.
func ticketTry(t *testing.T, ctx context.Context, cert tls.Certificate, o *ticketOutcome) {
	start := time.Now()
	defer func() { o.took = time.Since(start) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	port := addr[strings.LastIndex(addr, ":")+1:]
	var issued, offered, pings atomic.Int64
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		// TLS 1.2: the ticket goes in the session_ticket extension as it is,
		// and Chromium may offer it again and again (a TLS 1.3 ticket, a PSK
		// identity, is used once).
		MaxVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		WrapSession: func(tls.ConnectionState, *tls.SessionState) ([]byte, error) {
			issued.Add(1)
			return []byte(ticketPayload), nil
		},
		UnwrapSession: func(identity []byte, _ tls.ConnectionState) (*tls.SessionState, error) {
			if bytes.Equal(identity, []byte(ticketPayload)) {
				offered.Add(1)
			}
			return nil, nil // a full handshake, and a new ticket
		},
	}
	page := `<!doctype html><html><body><p id="n">0</p><script>
let n = 0;
function ping() {
  n++;
  fetch("https://evil.test:` + port + `/ping?" + n, {mode: "no-cors", cache: "no-store"})
    .then(() => {}, () => {});
  document.getElementById("n").textContent = n;
}
setInterval(ping, 300);
ping();
</script></body></html>`
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/ping" {
				pings.Add(1)
				io.WriteString(w, "pong")
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, page)
		}),
		ErrorLog: log.New(io.Discard, "", 0),
	}
	// A new TLS connection for each fetch.
	srv.SetKeepAlivesEnabled(false)
	go srv.Serve(tls.NewListener(ln, cfg))
	defer srv.Close()
	defer func() {
		o.issued, o.offered, o.pings = issued.Load(), offered.Load(), pings.Load()
	}()

	nctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(nctx, chromedp.Navigate("https://evil.test:"+port+"/")); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	defer func() {
		// Stops the page's fetches.
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = chromedp.Do(sctx, chromedp.Navigate("about:blank"))
	}()
	// Chromium has the ticket once it offers it back.
	for deadline := time.Now().Add(30 * time.Second); offered.Load() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Chromium did not offer the ticket again within 30s: %d tickets issued, %d fetches answered", issued.Load(), pings.Load())
		}
	}

	// The rebinding: the name's host and port are now the RESP port.
	srv.Close()
	p := startServeProc(t, false, "--resp-addr", addr)
	p.resp = addr
	o.rebound = true
	held := p.acquire("", "adminlease", "admin")
	look := func() {
		o.victim, o.released = false, true
		for _, l := range p.state() {
			switch l.Name {
			case "victim":
				o.victim = true
			case "adminlease":
				o.released = l.Token != held
			}
		}
		o.foreign = p.metric(foreignClosed)
	}
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if look(); o.ran() || o.foreign >= 3 {
			break
		}
	}
	// The RESP port took a few of the page's connections; anything they
	// could have run has run by now.
	time.Sleep(300 * time.Millisecond)
	look()
	if o.ran() {
		t.Errorf("the ticket's commands ran: victim taken %v, adminlease released %v", o.victim, o.released)
	}
	if o.foreign == 0 && !o.ran() {
		t.Errorf("the RESP port closed no connection as foreign_protocol in 15s (the TLS server issued %d tickets, Chromium offered the ticket %d times)", issued.Load(), offered.Load())
	}
	t.Logf("port %s: %d tickets issued, offered back %d times, %d fetches answered; then %v closed as foreign_protocol, victim taken %v, adminlease released %v",
		port, issued.Load(), offered.Load(), pings.Load(), o.foreign, o.victim, o.released)
}
