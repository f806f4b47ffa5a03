package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/testrig/servertest"
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

// TestServeMutualTLS: with a client CA, only clients with a certificate it
// signed get in, on both listeners; the remote store connects with ?ca=,
// ?cert= and ?key=.
func TestServeMutualTLS(t *testing.T) {
	p := servertest.NewPKI(t)
	eng, err := OpenEngine(EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := startServe(t, eng, Config{
		RESPAddr: "127.0.0.1:0", TLSCert: p.CertFile, TLSKey: p.KeyFile, ClientCA: p.CAFile,
	})
	base := "https://" + srv.HTTPAddr().String()
	ctx := context.Background()

	with, err := remote.OpenHTTP(fmt.Sprintf("%s?ca=%s&cert=%s&key=%s", base, p.CAFile, p.ClientCert, p.ClientKey))
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

	without, err := remote.OpenHTTP(fmt.Sprintf("%s?ca=%s", base, p.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	defer without.Close()
	if _, err := without.Get(ctx, "tls/a"); err == nil || errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("a client without a certificate got an answer: %v", err)
	}
	wrongCA, err := remote.OpenHTTP(fmt.Sprintf("%s?ca=%s&cert=%s&key=%s", base, p.OtherCA, p.ClientCert, p.ClientKey))
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
	pemCA, _ := os.ReadFile(p.CAFile)
	roots.AppendCertsFromPEM(pemCA)
	cert, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
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
