// Package proctest holds what tests that run programs and servers as
// processes share: a free loopback address to give a server, waiting for
// it to answer, a child's environment, the go command.
// Both cmd/leasehold's end-to-end tests and the verification suites
// (internal/verify) use it.
package proctest

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
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

// EnvWithout returns this process's environment without the variables
// named in drop.
func EnvWithout(drop ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(drop, k) {
			env = append(env, kv)
		}
	}
	return env
}

// GoCommand returns the go command: the one of the toolchain that built
// this test binary, else the first on PATH; "" where there is none.
func GoCommand() string {
	if root := runtime.GOROOT(); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("go")
	if err != nil {
		return ""
	}
	return p
}
