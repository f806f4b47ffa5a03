package abuse

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
)

// The cases of issue 15: cross-protocol writes to the RESP port (raw and
// from a headless Chromium page), DNS rebinding of the HTTP port, RESP
// connection floods, memory sent before AUTH, replies never read, and HTTP
// bodies sent a byte at a time. The RESP cases run `leasehold serve` as a
// process, with its default bounds, and measure its RSS and fds.

// hdRow reports one case as an R11 row and fails the test on violations.
func hdRow(t *testing.T, name string, ops, faults, violations int, note string) {
	t.Helper()
	checker := "ok"
	if violations > 0 {
		checker = "failed"
	}
	verify.Report(t, verify.Row{Suite: "R11", Store: "server", Ops: ops, Faults: faults,
		Violations: violations, Checker: checker, Note: name + ": " + note})
	if violations > 0 {
		t.Errorf("%s: %d violations", name, violations)
	}
}

// tally counts an R11 case: its operations, faults and violations, and
// the first violations found.
type tally struct {
	ops, faults, violations int
	notes                   []string
}

// fail counts a violation and keeps its description (the first five).
func (c *tally) fail(format string, args ...any) {
	c.violations++
	if len(c.notes) < 5 {
		c.notes = append(c.notes, fmt.Sprintf(format, args...))
	}
}

// errorf counts a violation and fails t with it.
func (c *tally) errorf(t *testing.T, format string, args ...any) {
	t.Helper()
	c.violations++
	t.Errorf(format, args...)
}

// row reports the case as an R11 row (hdRow): its note is ok when fail
// found nothing, else the violations fail kept.
func (c *tally) row(t *testing.T, name, ok string) {
	t.Helper()
	note := ok
	if len(c.notes) > 0 {
		note = strings.Join(c.notes, "; ")
	}
	hdRow(t, name, c.ops, c.faults, c.violations, note)
}

// respAttackBody is what a page posts to the RESP port: two commands that
// take a lease and free the admin's.
const respAttackBody = "LH.ACQUIRE r11/stolen evil 60000\r\nLH.FORCERELEASE other/secret\r\n"

// crossProtocol sends n HTTP requests, each carrying respAttackBody, to
// the RESP port of a server with auth off (the default): every connection
// must be closed without an answer and nothing may change. A polite RESP
// client keeps acquiring meanwhile.
func crossProtocol(t *testing.T, p *serveProc, n int) {
	before := p.state()
	pol := newRESPPolite(t, p.resp, "127.0.0.2", "")
	alone, aloneN := pol.baseline(t, 100)
	raw := fmt.Sprintf("POST / HTTP/1.1\r\nHost: %s\r\nOrigin: http://evil.example\r\nContent-Type: text/plain;charset=UTF-8\r\nContent-Length: %d\r\n\r\n%s",
		p.resp, len(respAttackBody), respAttackBody)
	wrong, sent := 0, 0
	under, underN, pw := pol.during(func() {
		// After 5 failures (each waits 30s for a close) the case stops.
		for i := 0; i < n && wrong < 5; i++ {
			sent++
			nc, err := net.DialTimeout("tcp", p.resp, 30*time.Second)
			if err != nil {
				t.Errorf("dial: %v", err)
				wrong++
				continue
			}
			io.WriteString(nc, raw)
			got, closed := readAll(nc, 30*time.Second)
			nc.Close()
			if !closed || got != "" {
				wrong++
				t.Errorf("attack %d: answered %.80q, connection closed: %v", i, got, closed)
			}
		}
	})
	changes := 0
	if after := p.state(); !slices.Equal(after, before) {
		changes++
		t.Errorf("the attack changed the leases: %v, was %v", after, before)
	}
	closedN := p.metric(`leasehold_resp_connections_closed_total{reason="http_request"}`)
	wrong += len(pw)
	for _, w := range pw[:min(len(pw), 3)] {
		t.Errorf("polite RESP client: %s", w)
	}
	hdRow(t, "resp-cross-protocol", sent+underN, sent, wrong+changes,
		fmt.Sprintf("%d HTTP POSTs with LH.ACQUIRE+LH.FORCERELEASE in the body sent to the RESP port (auth off): %d closed unanswered (leasehold_resp_connections_closed_total{reason=http_request} %v), leases unchanged: %v; polite RESP p99 %s alone (n=%d), %s under attack (n=%d)",
			sent, sent-wrong, closedN, changes == 0, round(alone), aloneN, round(under), underN))
}

// browserCrossProtocol loads a page (another origin) whose script fetches
// the RESP port with respAttackBody, in headless Chromium: the server must
// see the request and close it, and no lease change.
func browserCrossProtocol(t *testing.T, p *serveProc) {
	chrome := os.Getenv("LEASEHOLD_TEST_CHROMIUM")
	if chrome == "" {
		for _, name := range []string{"chromium", "chromium-browser"} {
			if path, err := exec.LookPath(name); err == nil {
				chrome = path
				break
			}
		}
	}
	if chrome == "" {
		t.Skip("no Chromium: $LEASEHOLD_TEST_CHROMIUM is empty and there is none in PATH")
	}
	before := p.state()
	closedBefore := p.metric(`leasehold_resp_connections_closed_total{reason="http_request"}`)
	page := fmt.Sprintf(`<!doctype html><html><body><p id="r">pending</p><script>
fetch("http://%s/", {method: "POST", mode: "no-cors", body: %q})
  .then(() => { document.getElementById("r").textContent = "fetch-resolved"; },
        () => { document.getElementById("r").textContent = "fetch-rejected"; });
</script></body></html>`, p.resp, respAttackBody)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, page)
	}))
	defer site.Close()
	cmd := exec.Command(chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--user-data-dir="+t.TempDir(), "--virtual-time-budget=15000", "--dump-dom", site.URL+"/")
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { defer close(done); out, err = cmd.Output() }()
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("Chromium did not finish the page within 120s")
	}
	dom := string(out)
	violations := 0
	if err != nil || !strings.Contains(dom, "fetch-") {
		t.Fatalf("the page's fetch did not finish: %v\n%.400s", err, dom)
	}
	var closedAfter float64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if closedAfter = p.metric(`leasehold_resp_connections_closed_total{reason="http_request"}`); closedAfter > closedBefore {
			break
		}
	}
	if closedAfter <= closedBefore {
		violations++
		t.Error("the server did not see (and close) the browser's request")
	}
	if after := p.state(); !slices.Equal(after, before) {
		violations++
		t.Errorf("the page changed the leases: %v, was %v", after, before)
	}
	settled := "rejected"
	if strings.Contains(dom, "fetch-resolved") {
		settled = "resolved"
	}
	hdRow(t, "resp-cross-protocol-browser", 1, 1, violations,
		fmt.Sprintf("headless Chromium page on another origin fetch()es the RESP port with LH.ACQUIRE+LH.FORCERELEASE: the page's fetch settled (%s), connections closed as HTTP %v→%v, leases unchanged: %v",
			settled, closedBefore, closedAfter, violations == 0))
}

// rebinding sends n requests with a Host that is not loopback (a page
// whose name was re-pointed at the server) to a server with auth off:
// all get 421, nothing changes; localhost still works.
func rebinding(t *testing.T, p *serveProc, n int) {
	before := p.state()
	host := "rebind.example:" + p.addr[strings.LastIndex(p.addr, ":")+1:]
	shapes := []struct{ method, path, body string }{
		{"POST", "/v1/leases/r11/rebind/acquire", `{"owner":"evil","ttl_ms":60000}`},
		{"POST", "/v1/leases/other/secret/force-release", ""},
		{"GET", "/v1/leases", ""},
	}
	wrong := 0
	statuses := map[int]int{}
	for i := 0; i < n; i++ {
		s := shapes[i%len(shapes)]
		req, _ := http.NewRequest(s.method, p.url+s.path, strings.NewReader(s.body))
		req.Host = host
		res, err := p.client.Do(req)
		if err != nil {
			wrong++
			t.Errorf("%s %s: %v", s.method, s.path, err)
			continue
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		statuses[res.StatusCode]++
		if res.StatusCode != http.StatusMisdirectedRequest {
			if wrong++; wrong <= 5 {
				t.Errorf("%s %s with Host %s: %d, want 421", s.method, s.path, host, res.StatusCode)
			}
		}
	}
	changes := 0
	if after := p.state(); !slices.Equal(after, before) {
		changes++
		t.Errorf("rebinding requests changed the leases: %v, was %v", after, before)
	}
	req, _ := http.NewRequest("GET", p.url+"/v1/leases", nil)
	req.Host = "localhost:7070"
	if res, err := p.client.Do(req); err != nil || res.StatusCode != 200 {
		wrong++
		t.Errorf("Host localhost: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	hdRow(t, "http-dns-rebinding", n+1, n, wrong+changes,
		fmt.Sprintf("%d requests (acquire, force-release, list) with Host %s to the HTTP port, auth off: answers %v; leases unchanged: %v; Host localhost served",
			n, host, statuses, changes == 0))
}

// raiseFDLimit lets this process hold n more sockets.
func raiseFDLimit(t *testing.T, n uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur >= n {
		return
	}
	rl.Cur = min(rl.Max, n)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < n {
		t.Skipf("cannot raise the fd limit to %d (hard limit %d): %v", n, rl.Max, err)
	}
}

// connFlood opens n idle connections from one client address to the RESP
// port of a server with auth on: the server keeps at most its per-address
// cap (1,000) and refuses the rest with an error; its fds stay bounded and
// a polite client (another address) keeps acquiring.
func connFlood(t *testing.T, p *serveProc, n int) {
	raiseFDLimit(t, uint64(n)+1024)
	const perAddr = 1000 // the default --resp-max-conns-per-addr
	pol := newRESPPolite(t, p.resp, "127.0.0.2", politeToken)
	alone, aloneN := pol.baseline(t, 100)
	fdsBefore := p.fds()
	conns := make([]net.Conn, n)
	var refused, open, failed atomic.Int64
	var maxFDs int
	under, underN, pw := pol.during(func() {
		var wg sync.WaitGroup
		var next atomic.Int64
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}, Timeout: 30 * time.Second}
				for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
					nc, err := d.Dial("tcp", p.resp)
					if err != nil {
						failed.Add(1)
						continue
					}
					conns[i] = nc
				}
			}()
		}
		wg.Wait()
		maxFDs = p.fds()
		// A refused connection is answered and closed at once; a kept one
		// says nothing (its AUTH deadline is far off).
		for _, nc := range conns {
			if nc == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, closed := readAll(nc, 5*time.Second)
				switch {
				case closed && strings.HasPrefix(got, "-ERR max number of clients reached"):
					refused.Add(1)
				case !closed && got == "":
					open.Add(1)
				default:
					failed.Add(1)
				}
			}()
		}
		wg.Wait()
		maxFDs = max(maxFDs, p.fds())
	})
	for _, nc := range conns {
		if nc != nil {
			nc.Close()
		}
	}
	violations := int(failed.Load())
	if open.Load() != perAddr || refused.Load() != int64(n-perAddr) {
		violations++
		t.Errorf("of %d connections from one address: %d kept, %d refused; want %d kept", n, open.Load(), refused.Load(), perAddr)
	}
	if maxFDs > fdsBefore+perAddr+64 {
		violations++
		t.Errorf("server fds: %d before, %d during the flood (bound %d)", fdsBefore, maxFDs, fdsBefore+perAddr+64)
	}
	violations += len(pw)
	for _, w := range pw[:min(len(pw), 3)] {
		t.Errorf("polite RESP client: %s", w)
	}
	if under > 10*time.Second {
		violations++
		t.Errorf("polite p99 under the flood: %v (bound 10s)", under)
	}
	hdRow(t, "resp-conn-flood", n+underN, n, violations,
		fmt.Sprintf("%d idle sockets from one address: %d kept, %d refused (per-address cap %d), %d failed; server fds %d before, %d at most during; polite RESP p99 %s alone (n=%d), %s under the flood (n=%d, another address)",
			n, open.Load(), refused.Load(), perAddr, failed.Load(), fdsBefore, maxFDs, round(alone), aloneN, round(under), underN))
}

// rssWatch samples the server's RSS until stop is closed and returns the
// highest value seen.
func rssWatch(p *serveProc, stop <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		peak := p.rss()
		for {
			select {
			case <-stop:
				out <- max(peak, p.rss())
				return
			case <-time.After(20 * time.Millisecond):
				peak = max(peak, p.rss())
			}
		}
	}()
	return out
}

// preAuthMemory sends, on conns connections that have not authenticated,
// a command of 300 bulk strings of 1 MiB (and an AUTH with a 1 MiB
// token): the server must refuse them at their headers, with its RSS
// under a bound.
func preAuthMemory(t *testing.T, p *serveProc, conns, bulks int) {
	const bound = 64 * mib
	pol := newRESPPolite(t, p.resp, "127.0.0.2", politeToken)
	alone, aloneN := pol.baseline(t, 100)
	before := p.rss()
	stop := make(chan struct{})
	peakc := rssWatch(p, stop)
	bulk := append(make([]byte, mib), '\r', '\n')
	var refused, other atomic.Int64
	under, underN, pw := pol.during(func() {
		var wg sync.WaitGroup
		for i := 0; i < 2*conns; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nc, err := net.DialTimeout("tcp", p.resp, 30*time.Second)
				if err != nil {
					other.Add(1)
					return
				}
				defer nc.Close()
				answer := make(chan string, 1)
				go func() {
					line, _ := bufio.NewReader(nc).ReadString('\n')
					answer <- line
				}()
				nc.SetWriteDeadline(time.Now().Add(60 * time.Second))
				if i%2 == 0 {
					fmt.Fprintf(nc, "*%d\r\n", bulks)
				} else {
					io.WriteString(nc, "*2\r\n$4\r\nAUTH\r\n")
				}
				for j := 0; j < bulks; j++ {
					if _, err := fmt.Fprintf(nc, "$%d\r\n", mib); err != nil {
						break
					}
					if _, err := nc.Write(bulk); err != nil {
						break // refused and closed by the server
					}
				}
				if line := <-answer; strings.HasPrefix(line, "-ERR Protocol error") {
					refused.Add(1)
				} else {
					other.Add(1)
					t.Errorf("pre-auth connection %d: answered %q", i, line)
				}
			}()
		}
		wg.Wait()
	})
	close(stop)
	peak := <-peakc
	violations := int(other.Load()) + len(pw)
	for _, w := range pw[:min(len(pw), 3)] {
		t.Errorf("polite RESP client: %s", w)
	}
	if peak-before > bound {
		violations++
		t.Errorf("server RSS %d MiB before, %d MiB at its peak: more than %d MiB more", before/mib, peak/mib, bound/mib)
	}
	hdRow(t, "resp-pre-auth-memory", 2*conns+underN, 2*conns, violations,
		fmt.Sprintf("%d connections sent *%d + %d×1 MiB bulks, %d an AUTH of that size, before AUTH: %d refused at the header; server RSS %d MiB before, %d MiB peak (bound +%d MiB); polite RESP p99 %s alone (n=%d), %s under abuse (n=%d)",
			conns, bulks, bulks, conns, refused.Load(), before/mib, peak/mib, bound/mib, round(alone), aloneN, round(under), underN))
}

// unreadReplies pipelines n PINGs with a 1 MiB payload on an
// authenticated connection and never reads a reply: the server must
// disconnect it (output-buffer limit) with its RSS under a bound.
func unreadReplies(t *testing.T, p *serveProc, n int) {
	const bound = 128 * mib
	pol := newRESPPolite(t, p.resp, "127.0.0.2", politeToken)
	alone, aloneN := pol.baseline(t, 100)
	before := p.rss()
	closedBefore := p.metric(`leasehold_resp_connections_closed_total{reason="output_limit"}`)
	stop := make(chan struct{})
	peakc := rssWatch(p, stop)
	var sent int
	var writeErr error
	under, underN, pw := pol.during(func() {
		c, err := dialRESP(p.resp, "127.0.0.4", tenantToken)
		if err != nil {
			t.Fatalf("abuser: %v", err)
		}
		defer c.nc.Close()
		payload := strings.Repeat("u", mib)
		cmd := fmt.Sprintf("*2\r\n$4\r\nPING\r\n$%d\r\n%s\r\n", len(payload), payload)
		c.nc.SetWriteDeadline(time.Now().Add(120 * time.Second))
		for sent = 0; sent < n; sent++ {
			if _, writeErr = io.WriteString(c.nc, cmd); writeErr != nil {
				break
			}
		}
		// Wait (bounded) for the server to count the disconnection.
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if p.metric(`leasehold_resp_connections_closed_total{reason="output_limit"}`) > closedBefore {
				break
			}
		}
	})
	close(stop)
	peak := <-peakc
	closedAfter := p.metric(`leasehold_resp_connections_closed_total{reason="output_limit"}`)
	violations := len(pw)
	for _, w := range pw[:min(len(pw), 3)] {
		t.Errorf("polite RESP client: %s", w)
	}
	if closedAfter != closedBefore+1 {
		violations++
		t.Errorf("connections closed at the output limit: %v → %v, want one more", closedBefore, closedAfter)
	}
	if peak-before > bound {
		violations++
		t.Errorf("server RSS %d MiB before, %d MiB at its peak: more than %d MiB more", before/mib, peak/mib, bound/mib)
	}
	hdRow(t, "resp-unread-replies", n+underN, n, violations,
		fmt.Sprintf("%d pipelined PINGs of 1 MiB never read: disconnected after %d were sent (%v), output_limit closes %v→%v; server RSS %d MiB before, %d MiB peak (bound +%d MiB); polite RESP p99 %s alone (n=%d), %s under abuse (n=%d)",
			n, sent, writeErr != nil, closedBefore, closedAfter, before/mib, peak/mib, bound/mib, round(alone), aloneN, round(under), underN))
}

// slowBody opens n connections (half with a token, half without) that
// send a request body one byte every 2 s: the server must cut each within
// its body deadline (10 s by default) plus slack, and change nothing.
func slowBody(t *testing.T, ts *testServer, p *polite, n int, alone time.Duration, aloneN int) {
	const deadline, slack = 10 * time.Second, 30 * time.Second
	before := ts.state()
	ctx, stop := context.WithCancel(context.Background())
	var pw sync.WaitGroup
	pw.Add(1)
	go func() { defer pw.Done(); p.run(ctx, 0) }()
	var mu sync.Mutex
	statuses := map[string]int{}
	violations := 0
	var longest time.Duration
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			auth := ""
			if i%2 == 0 {
				auth = "Authorization: Bearer " + tenantToken + "\r\n"
			}
			status, took, err := dripBody(ts.addr, auth, deadline+slack)
			mu.Lock()
			defer mu.Unlock()
			longest = max(longest, took)
			if err != nil {
				violations++
				t.Errorf("slow body %d: %v", i, err)
				return
			}
			statuses[status]++
		}()
	}
	wg.Wait()
	stop()
	pw.Wait()
	if after := ts.state(); !slices.Equal(after, before) {
		violations++
		t.Errorf("slow bodies changed the leases: %v, was %v", after, before)
	}
	lat, reqs, wrong := p.take()
	violations += len(wrong)
	for _, w := range wrong[:min(len(wrong), 3)] {
		t.Errorf("polite client: %s", w)
	}
	hdRow(t, "http-slow-body", n+reqs, n, violations,
		fmt.Sprintf("%d bodies sent a byte every 2s (half with a token): cut after %s at most (deadline %s): %v; polite p99 %s alone (n=%d), %s under abuse (n=%d)",
			n, round(longest), deadline, statuses, round(alone), aloneN, round(p99(lat)), len(lat)))
}

// dripBody sends a request whose body is promised 1,000 bytes and sent a
// byte every 2 s. It returns the status line's code ("closed" when the
// server closed without answering) and how long the server took.
func dripBody(addr, auth string, giveUp time.Duration) (string, time.Duration, error) {
	nc, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return "", 0, err
	}
	defer nc.Close()
	fmt.Fprintf(nc, "POST /v1/leases/tenant-a/slow/acquire HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n%s\r\n{", addr, auth)
	start := time.Now()
	answer := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(nc)
		answer <- string(b)
	}()
	for {
		select {
		case got := <-answer:
			code := "closed"
			if len(got) >= 12 && strings.HasPrefix(got, "HTTP/1.1 ") {
				code = got[9:12]
			}
			return code, time.Since(start), nil
		case <-time.After(2 * time.Second):
		}
		if d := time.Since(start); d > giveUp {
			return "", d, fmt.Errorf("connection still open after %v", d.Round(time.Second))
		}
		nc.Write([]byte{' '})
	}
}

// authGuessing pipelines n wrong AUTHs from one address and reads the
// answers for a window: only a few are checked (10, then one a second),
// the rest refused as rate-limited, each refusal 250 ms late, so that the
// guesser gets at most about 4 answers a second after its burst; a polite
// client on another address keeps acquiring.
func authGuessing(t *testing.T, p *serveProc, n int) {
	const window = 10 * time.Second
	pol := newRESPPolite(t, p.resp, "127.0.0.2", politeToken)
	alone, aloneN := pol.baseline(t, 100)
	counts := map[string]int{}
	var elapsed time.Duration
	violations := 0
	under, underN, pw := pol.during(func() {
		start := time.Now()
		c, err := dialRESP(p.resp, "127.0.0.5", "")
		if err != nil {
			t.Fatalf("guesser: %v", err)
		}
		defer c.nc.Close()
		c.nc.SetDeadline(start.Add(window))
		go func() {
			var b []byte
			for i := 0; i < n; i++ {
				b = append(b, fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$12\r\nguess-%06d\r\n", i)...)
			}
			c.nc.Write(b)
		}()
		for i := 0; i < n; i++ {
			v, err := c.rd.ReadValue()
			if err != nil {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					violations++
					t.Errorf("answer %d: %v", i, err)
				}
				break // the window is over
			}
			code, _, _ := strings.Cut(string(v.Str), " ")
			counts[code]++
		}
		elapsed = time.Since(start)
	})
	checked, refused := counts["WRONGPASS"], counts["RATELIMITED"]
	secs := elapsed.Seconds()
	if float64(checked) > 10+secs+1 || float64(checked+refused) > 10+5*(secs+1) || checked < 10 {
		violations++
		t.Errorf("%d wrong AUTHs pipelined, %d answered in %v: %v (want at most 10 + 1/s checked and about 4 answers/s after the burst)", n, checked+refused, elapsed, counts)
	}
	if other := len(counts) - min(counts["WRONGPASS"], 1) - min(counts["RATELIMITED"], 1); other > 0 {
		violations++
		t.Errorf("answers other than WRONGPASS and RATELIMITED: %v", counts)
	}
	violations += len(pw)
	for _, w := range pw[:min(len(pw), 3)] {
		t.Errorf("polite RESP client: %s", w)
	}
	hdRow(t, "resp-auth-guessing", n+underN, n, violations,
		fmt.Sprintf("%d wrong AUTHs pipelined from one address, answers read for %s: %d checked (WRONGPASS), %d refused RATELIMITED (250 ms each); polite RESP p99 %s alone (n=%d), %s under abuse (n=%d, another address)",
			n, round(elapsed), checked, refused, round(alone), aloneN, round(under), underN))
}
