package remote_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

// TestAcquireWaitRetriesUnavailable: AcquireWait asks again, after a
// wait, while the server answers 503 unavailable (draining, or not ready),
// with the same request id each time, until it gets the grant; when its
// context ends while the server stays unavailable, it returns the
// context's error.
func TestAcquireWaitRetriesUnavailable(t *testing.T) {
	var mu sync.Mutex
	var ids []string
	grantAfter := 2 // unavailable answers before the grant; -1: never
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			RequestID string `json:"request_id"`
		}
		if r.URL.Path != "/v1/leases/n/acquire" || json.NewDecoder(r.Body).Decode(&body) != nil {
			http.Error(w, "unexpected request", http.StatusTeapot)
			return
		}
		mu.Lock()
		ids = append(ids, body.RequestID+" "+r.Header.Get("Idempotency-Key"))
		n, grant := len(ids), grantAfter
		mu.Unlock()
		if grant < 0 || n <= grant {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"type":"urn:leasehold:problem:unavailable","title":"Unavailable","status":503,"detail":"the server is shutting down"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"name":"n","owner":"o","token":5,"ttl_ms":1000,"remaining_ms":900,"acquired":"2026-01-02T03:04:05Z","secret":"s"}`)
	}))
	defer srv.Close()
	s, err := remote.OpenHTTP(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := leasehold.AcquireRequest{Name: "n", Owner: "o", TTL: time.Second}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, err := s.AcquireWait(ctx, req)
	if err != nil || rec.Token != 5 || rec.Remaining != 900*time.Millisecond || !rec.Acquired.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("AcquireWait = %+v, %v; want token 5's grant", rec, err)
	}
	if s.HolderSecret("n", "o", 5) != "s" {
		t.Errorf("the grant's secret was not kept")
	}
	mu.Lock()
	if len(ids) != 3 {
		t.Errorf("%d requests, want 3 (two unavailable, then the grant)", len(ids))
	}
	for _, id := range ids {
		rid, key, _ := strings.Cut(id, " ")
		if rid == "" || rid != strings.Fields(ids[0])[0] || key == "" {
			t.Errorf("requests (request id, idempotency key) %q: want one request id throughout, and keys", ids)
			break
		}
	}
	ids, grantAfter = nil, -1
	mu.Unlock()

	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := s.AcquireWait(ctx, req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AcquireWait on a server that stays unavailable: %v, want the context's deadline", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) < 2 {
		t.Errorf("%d requests in 2s of unavailable answers, want it to ask again", len(ids))
	}
}
