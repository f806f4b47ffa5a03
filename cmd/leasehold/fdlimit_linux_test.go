package main

import (
	"bufio"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/proctest"
)

// TestServeFitsFileLimit (issue 26's review, F7): with an open-file limit
// below the default connection caps' sum, idle connections from a few
// addresses used to take every descriptor — accept failed with "too many
// open files" and newcomers on both ports hung — before a cap could
// refuse or evict anyone. serve now lowers default caps to fit the limit:
// with 1,200 files, 700 idle RESP connections and 700 HTTP event streams
// held, a newcomer's PING is answered (an idle connection evicted) and an
// HTTP request is answered (503 at the cap).
func TestServeFitsFileLimit(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatal("prlimit (util-linux) is needed: ", err)
	}
	httpAddr, respAddr := proctest.FreeAddr(t), proctest.FreeAddr(t)
	cmd := exec.Command(prlimit, "--nofile=1200:1200", "--", bin, "serve", "--data-dir", filepath.Join(t.TempDir(), "d"),
		"--addr", httpAddr, "--resp-addr", respAddr, "--log-level", "info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	startGroup(t, cmd)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	proctest.WaitReady(t, "http://"+httpAddr+"/readyz", 30*time.Second)
	lowered := false
	for len(lines) > 0 && !lowered {
		lowered = strings.Contains(<-lines, "connection caps lowered")
	}
	if !lowered {
		t.Error("no log line says the connection caps were lowered to fit the file limit")
	}

	// 700 idle RESP connections and 700 HTTP event streams (which no
	// timeout ends), from two addresses each.
	var mu sync.Mutex
	var held []net.Conn
	var wg sync.WaitGroup
	for _, target := range []string{respAddr, httpAddr} {
		for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
				for range 350 {
					nc, err := d.Dial("tcp", target)
					if err != nil {
						continue // refused or closed at a cap: expected
					}
					if target == httpAddr {
						io.WriteString(nc, "GET /v1/events HTTP/1.1\r\nHost: "+httpAddr+"\r\n\r\n")
					}
					mu.Lock()
					held = append(held, nc)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, nc := range held {
			nc.Close()
		}
	})
	time.Sleep(500 * time.Millisecond) // let the server accept what it will

	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.9")}, Timeout: 10 * time.Second}
	nc, err := d.Dial("tcp", respAddr)
	if err != nil {
		t.Fatalf("a newcomer's RESP connection: %v", err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(nc, "PING\r\n")
	if line, err := bufio.NewReader(nc).ReadString('\n'); line != "+PONG\r\n" {
		t.Errorf("a newcomer's PING with 700 idle RESP connections held: %q, %v; want +PONG", line, err)
	}
	hc, err := d.Dial("tcp", httpAddr)
	if err != nil {
		t.Fatalf("a newcomer's HTTP connection: %v", err)
	}
	defer hc.Close()
	hc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(hc, "GET /readyz HTTP/1.1\r\nHost: "+httpAddr+"\r\n\r\n")
	status, err := bufio.NewReader(hc).ReadString('\n')
	if !strings.HasPrefix(status, "HTTP/1.1 200") && !strings.HasPrefix(status, "HTTP/1.1 503") {
		t.Errorf("a newcomer's HTTP request with 700 HTTP event streams held: %q, %v; want an answer (200, or 503 at the cap)", status, err)
	}
}
