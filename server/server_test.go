package server

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/remote"
)

// startServe runs Serve in the background on loopback ports and returns
// its addresses and a function that stops it and returns Serve's error.
func startServe(t *testing.T, b Backend, cfg Config) (s *Server, stop func() error) {
	t.Helper()
	if cfg.Addr == "" && cfg.HTTPListener == nil {
		cfg.Addr = "127.0.0.1:0"
	}
	srv, err := NewServer(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once bool
	var result error
	stop = func() error {
		if !once {
			once = true
			cancel()
			select {
			case result = <-done:
			case <-time.After(time.Minute):
				t.Fatal("Run did not return within a minute of its context ending")
			}
		}
		return result
	}
	t.Cleanup(func() { stop() })
	return srv, stop
}

func TestServeAndShutdown(t *testing.T) {
	eng, err := OpenEngine(EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv, stop := startServe(t, eng, Config{RESPAddr: "127.0.0.1:0", ShutdownTimeout: 30 * time.Second})
	base := "http://" + srv.HTTPAddr().String()
	res, err := http.Get(base + "/healthz")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", res, err)
	}
	res.Body.Close()

	// The RESP listener answers too.
	c, err := net.Dial("tcp", srv.RESPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "PING\r\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "+PONG\r\n" {
		t.Fatalf("RESP PING: %q %v", line, err)
	}

	// A long-poll in flight when the server stops is answered 503 at once,
	// not held until the shutdown deadline.
	st, err := remote.OpenHTTP(base)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if _, err := st.TryAcquire(ctx, leasehold.AcquireRequest{Name: "s", Owner: "holder", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() {
		body := strings.NewReader(`{"owner":"w","ttl_ms":60000,"wait_ms":120000}`)
		res, err := http.Post(base+"/v1/leases/s/acquire", "application/json", body)
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 503 {
				err = fmt.Errorf("long-poll at shutdown: %d %s", res.StatusCode, b)
			}
		}
		waitErr <- err
	}()
	htWaitFor(t, func() bool { return len(eng.Waiters("s")) == 1 })
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := <-waitErr; err != nil {
		t.Error(err)
	}
	if d := time.Since(start); d > 25*time.Second {
		t.Errorf("shutdown took %s: the long-poll held it up", d)
	}
	// The backend is closed, the listeners too.
	if err := eng.Ready(ctx); err == nil {
		t.Error("backend still ready after Run returned")
	}
	if _, err := net.DialTimeout("tcp", srv.HTTPAddr().String(), time.Second); err == nil {
		t.Error("HTTP listener still accepting")
	}
}

func TestServeConfigErrors(t *testing.T) {
	eng, err := OpenEngine(EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	for _, cfg := range []Config{
		{},
		{Addr: "127.0.0.1:0", TLSCert: "x.pem"},
		{Addr: "127.0.0.1:0", ClientCA: "ca.pem"},
		{Addr: "127.0.0.1:0", TLSCert: "/does/not/exist", TLSKey: "/does/not/exist"},
		{Addr: "256.0.0.1:0"},
	} {
		if s, err := NewServer(eng, cfg); err == nil {
			t.Errorf("NewServer(%+v) succeeded", cfg)
			s.Run(canceled())
		}
	}
	// Serve closes the backend on a configuration error.
	eng2, _ := OpenEngine(EngineConfig{})
	if err := Serve(context.Background(), eng2, Config{}); err == nil {
		t.Error("Serve with nothing to serve succeeded")
	}
	if err := eng2.Ready(context.Background()); err == nil {
		t.Error("Serve left the backend open after a configuration error")
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// pki is a throwaway CA with a server and a client certificate.
type pki struct {
	dir                                        string
	caFile, certFile, keyFile, cliCert, cliKey string
	otherCA                                    string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	p := &pki{dir: dir}
	ca, caKey := makeCert(t, nil, nil, "test CA", true)
	p.caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	srv, srvKey := makeCert(t, ca, caKey, "127.0.0.1", false)
	p.certFile = writePEM(t, dir, "server.pem", "CERTIFICATE", srv.Raw)
	p.keyFile = writeKey(t, dir, "server.key", srvKey)
	cli, cliKey := makeCert(t, ca, caKey, "client", false)
	p.cliCert = writePEM(t, dir, "client.pem", "CERTIFICATE", cli.Raw)
	p.cliKey = writeKey(t, dir, "client.key", cliKey)
	other, _ := makeCert(t, nil, nil, "other CA", true)
	p.otherCA = writePEM(t, dir, "other.pem", "CERTIFICATE", other.Raw)
	return p
}

func makeCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		BasicConstraintsValid: true,
		IsCA:                  isCA,
	}
	if isCA {
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeKey(t *testing.T, dir, name string, key *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name, "EC PRIVATE KEY", der)
}

// TestServeMutualTLS: with a client CA, only clients with a certificate it
// signed get in, on both listeners; the remote store connects with ?ca=,
// ?cert= and ?key=.
func TestServeMutualTLS(t *testing.T) {
	p := newPKI(t)
	eng, err := OpenEngine(EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := startServe(t, eng, Config{
		RESPAddr: "127.0.0.1:0", TLSCert: p.certFile, TLSKey: p.keyFile, ClientCA: p.caFile,
	})
	base := "https://" + srv.HTTPAddr().String()
	ctx := context.Background()

	with, err := remote.OpenHTTP(fmt.Sprintf("%s?ca=%s&cert=%s&key=%s", base, p.caFile, p.cliCert, p.cliKey))
	if err != nil {
		t.Fatal(err)
	}
	defer with.Close()
	rec, err := with.TryAcquire(ctx, leasehold.AcquireRequest{Name: "tls/a", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatalf("acquire over mutual TLS: %v", err)
	}
	if err := with.Release(ctx, "tls/a", "o", rec.Token); err != nil {
		t.Fatal(err)
	}

	without, err := remote.OpenHTTP(fmt.Sprintf("%s?ca=%s", base, p.caFile))
	if err != nil {
		t.Fatal(err)
	}
	defer without.Close()
	if _, err := without.Get(ctx, "tls/a"); err == nil || errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("a client without a certificate got an answer: %v", err)
	}
	wrongCA, err := remote.OpenHTTP(fmt.Sprintf("%s?ca=%s&cert=%s&key=%s", base, p.otherCA, p.cliCert, p.cliKey))
	if err != nil {
		t.Fatal(err)
	}
	defer wrongCA.Close()
	if _, err := wrongCA.Get(ctx, "tls/a"); err == nil || errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("a client that does not trust the server's CA got an answer: %v", err)
	}

	// RESP: TLS with the client certificate answers PING; without it the
	// handshake fails.
	roots := x509.NewCertPool()
	pemCA, _ := os.ReadFile(p.caFile)
	roots.AppendCertsFromPEM(pemCA)
	cert, err := tls.LoadX509KeyPair(p.cliCert, p.cliKey)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", srv.RESPAddr().String(), &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatalf("RESP over TLS: %v", err)
	}
	fmt.Fprintf(conn, "PING\r\n")
	line, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if err != nil || line != "+PONG\r\n" {
		t.Errorf("RESP PING over TLS: %q %v", line, err)
	}
	conn, err = tls.Dial("tcp", srv.RESPAddr().String(), &tls.Config{RootCAs: roots})
	if err == nil {
		fmt.Fprintf(conn, "PING\r\n")
		_, err = bufio.NewReader(conn).ReadString('\n')
		conn.Close()
	}
	if err == nil {
		t.Error("RESP answered a client without a certificate")
	}
}
