// Package silent gives tests a TCP server that accepts connections and
// never answers: what a store looks like when it hangs after the connect.
// The tests of connect timeouts in package stores and in the command
// (cmd/leasehold/cli) dial it.
package silent

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Server accepts connections on a loopback port, keeps them open without
// reading or writing, and counts them.
type Server struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

// Listen starts a Server; it stops, closing every connection, when the
// test ends.
func Listen(t testing.TB) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{ln: ln}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			c.Close()
		}
	})
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Accepted is how many connections the server has accepted so far.
func (s *Server) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// WaitAccepted waits (up to a minute, then fails the test) until the
// server has accepted more than n connections.
func (s *Server) WaitAccepted(t testing.TB, n int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); s.Accepted() <= n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("nothing connected to the silent server")
		}
	}
}
