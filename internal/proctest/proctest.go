// Package proctest holds what tests that run servers as processes share:
// a free loopback address to give a server, and waiting for it to answer.
// Both cmd/leasehold's end-to-end tests and the verification suites
// (internal/verify) use it.
package proctest

import (
	"net"
	"net/http"
	"testing"
	"time"
)

// FreeAddr returns a loopback TCP address (host:port) that was free a
// moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Ready reports whether a GET of url answers 200 OK (a server's /readyz).
func Ready(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// WaitReady polls url (see Ready) every 20 ms until it answers 200 OK, and
// fails the test if it has not within d.
func WaitReady(t testing.TB, url string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); !Ready(url); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 within %s", url, d)
		}
	}
}
