package remote_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/remote"
)

// TestTransportErrorsSayWhatWasSent: a refused connection sent nothing and
// says so; a connection that breaks after the request was written leaves
// the outcome unknown, and says that instead.
func TestTransportErrorsSayWhatWasSent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Second}

	// A port nothing listens on: refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	s, err := remote.OpenHTTP("http://" + refused)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.TryAcquire(ctx, req)
	if err == nil || !strings.Contains(err.Error(), "nothing was sent") || strings.Contains(err.Error(), "unknown") {
		t.Errorf("refused: %v, want an error saying nothing was sent", err)
	}

	// A server that reads the request and hangs up without answering.
	ln, err = net.Listen("tcp", "127.0.0.1:0")
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
				buf := make([]byte, 4096)
				var got []byte
				for !strings.Contains(string(got), "\r\n\r\n") {
					n, err := c.Read(buf)
					got = append(got, buf[:n]...)
					if err != nil {
						return
					}
				}
				_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				_, _ = io.Copy(io.Discard, c) // the body, then hang up
			}()
		}
	}()
	h, err := remote.OpenHTTP("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, err = h.TryAcquire(ctx, req)
	var held *leasehold.HeldError
	if err == nil || errors.As(err, &held) || !strings.Contains(err.Error(), "outcome is unknown") || strings.Contains(err.Error(), "nothing was sent") {
		t.Errorf("hung up after the request: %v, want an error saying the outcome is unknown", err)
	}
}
