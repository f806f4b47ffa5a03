package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/testrig/servertest"
)

// poisonedTicketHello returns the bytes of a real TLS ClientHello, made by
// crypto/tls, whose session ticket is payload: a throwaway TLS server hands
// the client a ticket of exactly those bytes (WrapSession), and the client
// offers it again on its next connection to the same server name. That is
// what a browser does after a page talked to an attacker's TLS server and
// the name was rebound to the RESP port's address (issue 26: 19 of 20
// tries ran the ticket's commands).
func poisonedTicketHello(t *testing.T, payload string) []byte {
	t.Helper()
	cert, key := servertest.MakeCert(t, nil, nil, "evil.test", false)
	srvCfg := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}},
		MaxVersion:   tls.VersionTLS12, // a ticket in the session_ticket extension, sent as is
		WrapSession: func(tls.ConnectionState, *tls.SessionState) ([]byte, error) {
			return []byte(payload), nil
		},
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*tls.Conn).Handshake()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	cache := tls.NewLRUClientSessionCache(4)
	cliCfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", ClientSessionCache: cache, MaxVersion: tls.VersionTLS12}
	c, err := tls.Dial("tcp", ln.Addr().String(), cliCfg)
	if err != nil {
		t.Fatal(err)
	}
	// The ticket arrives with the handshake's end; a read makes sure.
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, _ = c.Read(make([]byte, 1))
	c.Close()
	// The second ClientHello, captured: it carries the ticket.
	a, b := net.Pipe()
	go func() {
		_ = tls.Client(a, cliCfg).Handshake()
		a.Close()
	}()
	_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 16<<10)
	n, _ := io.ReadAtLeast(b, buf, 5)
	for n < 5+int(buf[3])<<8|int(buf[4]) {
		m, err := b.Read(buf[n:])
		if err != nil {
			break
		}
		n += m
	}
	b.Close()
	hello := buf[:n]
	if !strings.Contains(string(hello), payload) {
		t.Fatal("the ClientHello does not carry the ticket")
	}
	return hello
}

// TestRESPRefusesForeignProtocols: bytes of another protocol sent to the
// RESP port run nothing: a TLS ClientHello whose session ticket holds
// command lines, binary junk that starts with a letter, an unknown command
// before any known one. Each connection is closed without an answer, and
// counted (reason foreign_protocol). Before the fix the ticket's
// LH.ACQUIRE and LH.FORCERELEASE ran.
func TestRESPRefusesForeignProtocols(t *testing.T) {
	m := NewMetrics(nil)
	b := rtEngine(t)
	_, addr := rtServe(t, b, RESPOptions{Metrics: m})
	ctx := context.Background()
	held := mustAcquire(t, b, "adminlease")
	payload := "\r\nLH.ACQUIRE victim evil 60000\r\nLH.FORCERELEASE adminlease\r\n"
	hello := poisonedTicketHello(t, payload)
	for _, raw := range []string{
		string(hello),
		// The same lines behind a first line of binary junk that starts
		// with a letter, and behind one with invalid UTF-8.
		"A\x01\x02\x03\x16\x03\x01" + payload,
		"Ab\xff\xfe" + payload,
		// An unknown command first: no client of ours starts so.
		"GREASE x" + payload,
	} {
		nc := rtDial(t, addr).nc
		if _, err := io.WriteString(nc, raw); err != nil {
			t.Fatal(err)
		}
		closed, got := hdClosed(nc, 30*time.Second)
		if !closed || got != "" {
			t.Errorf("%.12q: closed %v, answered %q; want closed without an answer", raw, closed, got)
		}
	}
	if _, err := b.Get(ctx, "victim"); err == nil {
		t.Error("a smuggled LH.ACQUIRE took a lease")
	}
	if rec, err := b.Get(ctx, "adminlease"); err != nil || rec.Token != held {
		t.Errorf("adminlease after the attack: %+v, %v (want token %d)", rec, err, held)
	}
	hdWaitClosed(t, m, closeForeign, 4)
	// Clients as they are keep working: inline commands typed by a person,
	// arrays, blank lines first, and an unknown command after a known one.
	c := rtDial(t, addr)
	if _, err := io.WriteString(c.nc, "\r\nPING\r\n"); err != nil {
		t.Fatal(err)
	}
	v, err := c.rd.ReadValue()
	if err != nil || string(v.Str) != "PONG" {
		t.Fatalf("inline PING after a blank line: %v, %v", v, err)
	}
	rtExpect(t, "unknown after known", c.do("SET", "a", "b"), "-ERR unknown command 'SET'")
	rtExpect(t, "ECHO", c.do("ECHO", "héllo\ttab"), "$héllo\ttab")
}

// leakyStore is a real store whose Get fails the way a store behind a
// proxy can (its engine's own error text, with an address in it).
type leakyStore struct{ *memory.Store }

func (leakyStore) Get(context.Context, string) (leasehold.Record, error) {
	return leasehold.Record{}, errors.New("redis get: WRONGPASS invalid username-password pair (10.0.0.5:6379)")
}

// TestRESPHidesBackendErrors: an error of the backend that has no reply of
// its own is answered "ERR internal error", as HTTP answers 500, and its
// text (a store's WRONGPASS, its address) stays in the server's log.
func TestRESPHidesBackendErrors(t *testing.T) {
	_, addr := rtServe(t, NewProxy(leakyStore{memory.New()}, ProxyConfig{}), RESPOptions{})
	c := rtDial(t, addr)
	got := c.do("LH.GET", "x")
	if got != "-ERR internal error; see the server's log" {
		t.Errorf("LH.GET with a failing backend = %q, want the internal error without the backend's words", got)
	}
}
