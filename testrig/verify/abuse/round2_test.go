package abuse

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/wire/resp"
)

// The floods of issue 26's round 2 (its "Major" items 2-7), one R11 row
// each, against one `leasehold serve` process with auth on. Each row
// asserts the item's property, that the server's RSS rises by less than a
// stated ceiling over the flood, and that a polite client (RESP, or HTTP
// for the HTTP rows) gets no wrong answer; its p99 alone and under the
// flood is reported, never asserted.
//
// Some bounds are set shorter or smaller than their defaults to keep the
// rows short; a binary that does not know a flag (LEASEHOLD_R11_SERVE_BIN,
// an older build) runs with its own behaviour, which is what the rows are
// meant to catch.
const (
	r2TotalOutput    = 32 << 20 // --resp-max-total-output-bytes (default 256 MiB)
	r2WriteTimeout   = 2 * time.Second
	r2CommandTimeout = 8 * time.Second
	r2BodyTimeout    = 2 * time.Second
	r2MaxSubs        = 2048 // --resp-max-subscriptions (default 20,000)
	r2PerConnSubs    = 1024 // the per-connection cap (not a flag)
	r2ListLeases     = 200  // leases of 64 KiB under tenant-a/list/: 13 MiB, 17 MB as JSON
)

func TestR11Round2(t *testing.T) {
	p := startServeProc(t, true, "--resp-auth-timeout", "2m",
		"--resp-max-total-output-bytes", strconv.Itoa(r2TotalOutput),
		"--write-timeout", r2WriteTimeout.String(),
		"--resp-command-timeout", r2CommandTimeout.String(),
		"--body-timeout", r2BodyTimeout.String(),
		"--resp-max-subscriptions", strconv.Itoa(r2MaxSubs))
	p.acquire(adminToken, "other/secret", "admin")
	r2BigState(t, p)
	// The rows that need little memory first: Go keeps the heap a row
	// grew for a while, and a later row's rise would be measured from it.
	t.Run("resp-subscribe-flood", func(t *testing.T) { r2SubscribeFlood(t, p, 4, verify.Size(8192, 65536)) })
	t.Run("resp-half-sent-commands", func(t *testing.T) { r2HalfSent(t, p, verify.Size(300, 600)) })
	t.Run("http-record-short-body", func(t *testing.T) { r2ShortRecordBody(t, p, verify.Size(20, 100)) })
	t.Run("resp-auth-lockout", func(t *testing.T) {
		r2AuthLockout(t, p, verify.Size(5*time.Second, 15*time.Second), verify.Size(8, 32))
	})
	t.Run("resp-replies-in-sum", func(t *testing.T) {
		r2RepliesInSum(t, p, verify.Size(10, 30), verify.Size(10, 20))
	})
	t.Run("http-unread-answers", func(t *testing.T) { r2UnreadAnswers(t, p, verify.Size(20, 40)) })
}

// r2BigState acquires tenant-a/big (64 KiB of data, for LH.GET) and
// r2ListLeases more of 64 KiB under tenant-a/list/ (for the lists), for a
// day.
func r2BigState(t *testing.T, p *serveProc) {
	c, err := dialRESP(p.resp, "127.0.0.1", tenantToken)
	if err != nil {
		t.Fatal(err)
	}
	defer c.nc.Close()
	data := strings.Repeat("d", 64<<10)
	names := []string{"tenant-a/big"}
	for i := 0; i < r2ListLeases; i++ {
		names = append(names, fmt.Sprintf("tenant-a/list/%03d", i))
	}
	for _, name := range names {
		if v, err := c.do("LH.ACQUIRE", name, "setup", "86400000", "DATA", data); err != nil || v.Type != resp.Array {
			t.Fatalf("acquire %s: %c%s %v", name, v.Type, v.Str, err)
		}
	}
}

// r2Fail counts a violation in c and fails t with it.
func r2Fail(t *testing.T, c *tally, format string, args ...any) {
	t.Helper()
	c.fail(format, args...)
	t.Errorf(format, args...)
}

// r2Row runs one flood: the polite RESP client is measured alone, then
// the server's RSS is sampled from before abuse to its end while the
// polite client runs (and, for an HTTP row, a polite HTTP reader too).
// abuse counts its operations, faults and violations in c and returns
// what it saw; the row adds a violation for each wrong answer of a polite
// client and one if the RSS rose by more than ceiling.
func r2Row(t *testing.T, p *serveProc, name string, ceiling int64, httpRow bool, abuse func(c *tally) string) {
	t.Helper()
	pol := newRESPPolite(t, p.resp, "127.0.0.2", politeToken)
	alone, aloneN := pol.baseline(t, 100)
	var reader *r2Reader
	if httpRow {
		reader = &r2Reader{p: p}
		reader.run(100)
		if len(reader.wrong) > 0 {
			t.Fatalf("the polite HTTP reader alone got wrong answers: %v", reader.wrong[0])
		}
		reader.alone = p99(reader.lat)
	}
	var c tally
	before := p.rss()
	stop := make(chan struct{})
	peakc := rssWatch(p, stop)
	start := time.Now()
	var saw string
	under, underN, wrong := pol.during(func() {
		if reader == nil {
			saw = abuse(&c)
			return
		}
		done := make(chan struct{})
		go func() { defer close(done); reader.run(-1) }()
		saw = abuse(&c)
		reader.stop.Store(true)
		<-done
	})
	took := time.Since(start)
	close(stop)
	peak := <-peakc
	c.ops += underN
	for _, w := range wrong {
		r2Fail(t, &c, "polite RESP client: %s", w)
	}
	politeNote := fmt.Sprintf("polite RESP p99 %s alone (n=%d), %s under abuse (n=%d)", round(alone), aloneN, round(under), underN)
	if reader != nil {
		c.ops += len(reader.lat)
		for _, w := range reader.wrong {
			r2Fail(t, &c, "polite HTTP reader: %s", w)
		}
		politeNote += fmt.Sprintf("; polite HTTP GET p99 %s alone (n=100), %s under abuse (n=%d)", round(reader.alone), round(p99(reader.lat)), len(reader.lat))
	}
	if peak-before > ceiling {
		r2Fail(t, &c, "server RSS %d MiB before, %d MiB at its peak: +%d MiB, over the ceiling of +%d MiB",
			before/mib, peak/mib, (peak-before)/mib, ceiling/mib)
	}
	note := fmt.Sprintf("%s; server RSS %d MiB before, %d MiB peak (+%d MiB, ceiling +%d MiB); %s; row %s",
		saw, before/mib, peak/mib, (peak-before)/mib, ceiling/mib, politeNote, round(took))
	if len(c.notes) > 0 {
		note += "; VIOLATIONS: " + strings.Join(c.notes, "; ")
	}
	hdRow(t, name, c.ops, c.faults, c.violations, note)
}

// r2Reader is a polite HTTP client of the HTTP rows: it reads its own
// lease polite/r (GET /v1/leases/polite/r: 200 or 404) in a loop.
type r2Reader struct {
	p     *serveProc
	stop  atomic.Bool
	lat   []time.Duration
	wrong []string
	alone time.Duration
}

// run reads n times (n < 0: until stop), keeping the latencies and wrong
// answers of this run only.
func (r *r2Reader) run(n int) {
	r.lat, r.wrong = nil, nil
	for i := 0; i != n && !r.stop.Load(); i++ {
		start := time.Now()
		res, err := r.p.do(r.p.client, request{method: "GET", path: "/v1/leases/" + politePrefix + "r", auth: bearer(politeToken)})
		if err != nil || res.status != 200 && res.status != 404 {
			r.wrong = append(r.wrong, fmt.Sprintf("GET /v1/leases/polite/r: %d %v", res.status, err))
			continue
		}
		r.lat = append(r.lat, time.Since(start))
	}
}

// r2Window is the receive buffer of the connections that do not read: a
// small one, so that what the server sends them waits in the server, not
// in this machine's socket buffers (Linux grows an unread socket's up to
// net.ipv4.tcp_rmem's maximum, 32 MiB here).
const r2Window = 16 << 10

func r2SmallWindow(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetReadBuffer(r2Window)
	}
}

// r2Conns dials n RESP connections from src authenticated with token, 16
// at a time; failed counts those that could not.
func r2Conns(p *serveProc, src, token string, n int) (conns []*respClient, failed int) {
	out := make([]*respClient, n)
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if c, err := dialRESP(p.resp, src, token); err == nil {
					out[i] = c
				}
			}
		}()
	}
	wg.Wait()
	for _, c := range out {
		if c == nil {
			failed++
		} else {
			conns = append(conns, c)
		}
	}
	return conns, failed
}

// r2Closed reads each connection until the server closes it or the
// bound passes, all at once, and returns how many were closed and the
// first line each sent (counted).
func r2Closed(conns []net.Conn, bound time.Duration) (closed int, first map[string]int) {
	var mu sync.Mutex
	first = map[string]int{}
	var wg sync.WaitGroup
	for _, nc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc.SetReadDeadline(time.Now().Add(bound))
			var head []byte
			buf := make([]byte, 32<<10)
			shut := false
			for {
				n, err := nc.Read(buf)
				if len(head) < 80 {
					head = append(head, buf[:min(n, 80-len(head))]...)
				}
				if err != nil {
					ne, ok := err.(net.Error)
					shut = !(ok && ne.Timeout())
					break
				}
			}
			line, _, _ := strings.Cut(string(head), "\r\n")
			if len(line) > 40 {
				line = line[:40] + "…"
			}
			mu.Lock()
			defer mu.Unlock()
			if shut {
				closed++
			}
			first[line]++
		}()
	}
	wg.Wait()
	return closed, first
}

func netConns(cs []*respClient) []net.Conn {
	out := make([]net.Conn, len(cs))
	for i, c := range cs {
		out[i] = c.nc
	}
	return out
}

// r2RepliesInSum (item 2): the replies waiting on all connections
// together are bounded (--resp-max-total-output-bytes, 32 MiB here), in
// two parts, none of whose connections reads: conns connections each
// pipeline 480 LH.GET of a 64 KiB lease (30 MiB of replies, under the 32
// MiB of one connection), then lists connections each send two LH.LIST of
// 13 MiB of leases. Readers must be closed by the server for the total
// (total_output), and the RSS must rise by less than 160 MiB + 8 MiB a
// reader over the row (240 MiB for 10, 400 for 30: the total, the two
// lists being built, the replies in flight when a connection is closed,
// and Go's heap growing ahead of its collector; measured up to +151 MiB
// for 10). Before
// the fixes 30 such readers took a server from 49 MB to 1.31 GB, 20 such
// lists to 1.17 GB. (Connections each under 1 MiB, the case of 2a236a1,
// are not here: on Linux the socket's own send buffer takes that much, out
// of the process's RSS; TestRESPTotalOutputManyUnderShare in server/ has
// them.)
func r2RepliesInSum(t *testing.T, p *serveProc, conns, lists int) {
	ceiling := int64(160+8*conns) * mib
	r2Row(t, p, "resp-replies-in-sum", ceiling, false, func(c *tally) string {
		readers := r2UnreadGets(t, p, c, conns, 480)
		listers, failed := r2Conns(p, "127.0.0.4", tenantToken, lists)
		if failed > 0 {
			r2Fail(t, c, "%d of %d list connections could not connect and AUTH", failed, lists)
		}
		listCmd := resp.AppendCommand(nil, "LH.LIST", "tenant-a/list/")
		for _, l := range listers {
			r2SmallWindow(l.nc)
			l.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			l.nc.Write(bytes.Repeat(listCmd, 2))
		}
		c.ops += 2 * len(listers)
		c.faults += len(listers)
		// Let the lists be built (or refused) before reading what came
		// first on each.
		time.Sleep(2 * time.Second)
		firsts := map[string]int{}
		for _, l := range listers {
			l.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			v, err := l.rd.ReadValue()
			switch {
			case err != nil:
				firsts["closed or no answer"]++
			case v.Type == resp.Array:
				firsts[fmt.Sprintf("%d leases", len(v.Array))]++
			default:
				code, _, _ := strings.Cut(string(v.Str), " ")
				firsts[string(v.Type)+code]++
			}
			l.nc.Close()
		}
		return fmt.Sprintf("%s; %d connections × 2 LH.LIST of %d leases of 64 KiB never read, first answers %v",
			readers, len(listers), r2ListLeases, firsts)
	})
}

// r2HTTPConns opens n connections to the HTTP port, with small receive
// windows, and sends request(i) on the i-th; they are closed when the
// test ends.
func r2HTTPConns(t *testing.T, p *serveProc, c *tally, n int, request func(i int) string) []net.Conn {
	var ncs []net.Conn
	for i := 0; i < n; i++ {
		nc, err := net.DialTimeout("tcp", p.addr, 30*time.Second)
		if err != nil {
			r2Fail(t, c, "dial: %v", err)
			continue
		}
		t.Cleanup(func() { nc.Close() })
		r2SmallWindow(nc)
		io.WriteString(nc, request(i))
		ncs = append(ncs, nc)
	}
	return ncs
}

// r2UnreadAnswers (item 3): conns connections each ask GET
// /v1/leases?prefix=tenant-a/list/ (17 MB of JSON in one answer before
// the 8 MiB pages; at most 8 MiB of leases a page since) and never read:
// the server must drop each connection within --write-timeout (2s here)
// plus 10s, and its RSS rise by less than 20 MiB a connection: HTTP
// answers are bounded per connection only (docs/server.md: connections ×
// the largest answer, a page of at most 8 MiB of leases), and each unread
// page is held, with its JSON in Go's heap, until the write timeout.
// Before, 40 such requests took a server from 49 to 705 MB, held 75 s and
// more.
// r2UnreadGets opens conns connections that each pipeline gets LH.GET of
// the 64 KiB lease tenant-a/big and never read: the server must close
// some of them for the total output. How many varies from run to run
// (those whose replies were built while the total was under its limit
// stay); the RSS ceiling bounds what they hold. It returns what it saw.
func r2UnreadGets(t *testing.T, p *serveProc, c *tally, conns, gets int) string {
	metric := `leasehold_resp_connections_closed_total{reason="total_output"}`
	closedBefore := p.metric(metric)
	readers, failed := r2Conns(p, "127.0.0.4", tenantToken, conns)
	if failed > 0 {
		r2Fail(t, c, "%d of %d reader connections could not connect and AUTH", failed, conns)
	}
	stop := make(chan struct{})
	peakc := rssWatch(p, stop)
	pipeline := bytes.Repeat(resp.AppendCommand(nil, "LH.GET", "tenant-a/big"), gets)
	var wg sync.WaitGroup
	for _, r := range readers {
		r2SmallWindow(r.nc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			r.nc.Write(pipeline)
		}()
	}
	wg.Wait()
	c.ops += len(readers) * gets
	c.faults += len(readers)
	// Those closed find their replies cut short; before, none was and
	// each held all its replies.
	closed, _ := r2Closed(netConns(readers), 3*time.Second)
	for _, r := range readers {
		r.nc.Close()
	}
	each := gets * 64 << 10
	closedBy := p.metric(metric) - closedBefore
	if closedBy < 1 {
		r2Fail(t, c, "%d connections × %d LH.GET (%d MiB of replies in all over a total output of %d MiB): none closed for the total output (total_output closes +%v; %d closed in all)",
			len(readers), gets, len(readers)*each/mib, r2TotalOutput/mib, closedBy, closed)
	}
	close(stop)
	return fmt.Sprintf("%d connections × %d pipelined LH.GET of a 64 KiB lease (%d KiB each) never read: %d closed by the server (total_output closes +%v), RSS peak %d MiB in this part",
		len(readers), gets, each>>10, closed, closedBy, <-peakc/mib)
}

func r2UnreadAnswers(t *testing.T, p *serveProc, conns int) {
	const slack = 10 * time.Second
	r2Row(t, p, "http-unread-answers", int64(conns)*20*mib, true, func(c *tally) string {
		fdsBefore := p.fds()
		req := fmt.Sprintf("GET /v1/leases?prefix=tenant-a/list/ HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", p.addr, tenantToken)
		ncs := r2HTTPConns(t, p, c, conns, func(int) string { return req })
		c.ops += len(ncs)
		c.faults += len(ncs)
		// Each answer has started (its status line came) before the
		// watch begins; the rest is not read.
		statuses := map[string]int{}
		for _, nc := range ncs {
			nc.SetReadDeadline(time.Now().Add(30 * time.Second))
			status := make([]byte, 12)
			if _, err := io.ReadFull(nc, status); err != nil {
				statuses[err.Error()]++
			} else {
				statuses[string(status[9:])]++
			}
		}
		if statuses["200"] != len(ncs) {
			r2Fail(t, c, "the answers' statuses: %v, want 200 for all %d", statuses, len(ncs))
		}
		start := time.Now()
		fdsMax := p.fds()
		// The server's own descriptors tell when it has let go (what a
		// client could still read sits in the kernel's buffers).
		fds := fdsMax
		for time.Since(start) < r2WriteTimeout+slack {
			if fds = p.fds(); fds <= fdsBefore+2 {
				break
			}
			fdsMax = max(fdsMax, fds)
			time.Sleep(100 * time.Millisecond)
		}
		held := time.Since(start)
		if fds > fdsBefore+2 {
			r2Fail(t, c, "server fds %d before %d unread answers, still %d after %s (write timeout %s)", fdsBefore, len(ncs), fds, round(held), r2WriteTimeout)
		}
		return fmt.Sprintf("%d GET /v1/leases (%d leases of 64 KiB) read no further than the status line (%v): server fds %d before, %d at most, %d after %s (write timeout %s)",
			len(ncs), r2ListLeases, statuses, fdsBefore, fdsMax, fds, round(held), r2WriteTimeout)
	})
}

// r2SubscribeFlood (item 4): conns connections each pipeline per
// LH.SUBSCRIBE of names of their own and read the answers: at most 1,024
// may be accepted on a connection and --resp-max-subscriptions (2,048
// here) in all, the rest refused, and the RSS stay under +64 MiB (+192
// MiB for the long tier's 262,144 commands: refused ones cost their
// parsing and replies too). Before,
// 65,536 a connection were accepted, a goroutine each: 4 connections took
// a server from 29 MB to 1.16 GB.
func r2SubscribeFlood(t *testing.T, p *serveProc, conns, per int) {
	r2Row(t, p, "resp-subscribe-flood", verify.Size[int64](64, 192)*mib, false, func(c *tally) string {
		subs, failed := r2Conns(p, "127.0.0.5", tenantToken, conns)
		if failed > 0 {
			r2Fail(t, c, "%d of %d connections could not connect and AUTH", failed, conns)
		}
		accepted := make([]int, len(subs))
		var refused, other atomic.Int64
		var wg sync.WaitGroup
		for i, s := range subs {
			wg.Add(2)
			go func() {
				defer wg.Done()
				var b []byte
				for j := 0; j < per; j++ {
					b = resp.AppendCommand(b, "LH.SUBSCRIBE", fmt.Sprintf("tenant-a/sub/%d/%d", i, j))
				}
				s.nc.SetWriteDeadline(time.Now().Add(60 * time.Second))
				s.nc.Write(b)
			}()
			go func() {
				defer wg.Done()
				s.nc.SetReadDeadline(time.Now().Add(60 * time.Second))
				for j := 0; j < per; j++ {
					v, err := s.rd.ReadValue()
					switch {
					case err != nil:
						other.Add(int64(per - j))
						return
					case v.Type == resp.Array:
						accepted[i]++
					case v.Type == resp.Error:
						refused.Add(1)
					default:
						other.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		for _, s := range subs {
			s.nc.Close()
		}
		total := 0
		for i, n := range accepted {
			total += n
			if n > r2PerConnSubs {
				r2Fail(t, c, "connection %d: %d subscriptions accepted, over the %d of one connection", i, n, r2PerConnSubs)
			}
		}
		if total > r2MaxSubs {
			r2Fail(t, c, "%d subscriptions accepted in all, over --resp-max-subscriptions %d", total, r2MaxSubs)
		}
		if other.Load() > 0 {
			r2Fail(t, c, "%d LH.SUBSCRIBE answered neither a subscription nor an error (or not at all)", other.Load())
		}
		c.ops += len(subs) * per
		c.faults += len(subs) * per
		return fmt.Sprintf("%d connections × %d LH.SUBSCRIBE: %d accepted (%v; at most %d a connection, %d in all), %d refused",
			len(subs), per, total, accepted, r2PerConnSubs, r2MaxSubs, refused.Load())
	})
}

// r2HalfSent (item 5): conns connections authenticate as one identity and
// send `*2 $4 ECHO $1048576` and never the bytes; then batches of 20 do
// the same with bulks of 64 KiB, 4 KiB, 256, 16 and 1 byte, each batch
// once the one before was (partly) refused, so that the input budget is
// filled to its last bytes if one identity can fill it. Meanwhile a new
// client (the admin, another address) must AUTH and be served, and every
// half-sent command's connection be closed within --resp-command-timeout
// (8s here) plus 10s (at once when its identity is over its share of the
// input budget); the RSS must stay under +192 MiB: the identity's share of
// the input budget (a quarter of 256 MiB), each connection's uncounted
// first 16 KiB and its buffers, twice over for the garbage Go's collector
// lets the heap hold (CI saw +98 MiB against an earlier ceiling of 96; a
// server without the shares held the whole 256 MiB). Before, 295 such
// connections held the whole budget for as long as they liked and every
// new client, the admin's AUTH included, was refused.
func r2HalfSent(t *testing.T, p *serveProc, conns int) {
	const slack, ceiling = 10 * time.Second, 192 * mib
	r2Row(t, p, "resp-half-sent-commands", ceiling, false, func(c *tally) string {
		start := time.Now()
		var half []*respClient
		var sent []string
		for i, size := range []int{1 << 20, 64 << 10, 4 << 10, 256, 16, 1} {
			n := 20
			if i == 0 {
				n = conns
			}
			// The abuser's own AUTHs fail once the budget is full (no
			// violation: the admin's are what counts).
			batch, failed := r2Conns(p, "127.0.0.6", tenantToken, n)
			for _, h := range batch {
				h.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
				fmt.Fprintf(h.nc, "*2\r\n$4\r\nECHO\r\n$%d\r\n", size)
			}
			half = append(half, batch...)
			// Those refused at once are answered and closed within this.
			refused, _ := r2Closed(netConns(batch), 300*time.Millisecond)
			sent = append(sent, fmt.Sprintf("%d×%dB (%d refused at once, %d more could not AUTH)", len(batch), size, refused, failed))
		}
		c.ops += len(half)
		c.faults += len(half)
		// The admin comes while they hold what they hold: twice, a second
		// apart (both within the command timeout of the last one sent).
		var adminOK int
		for i := 0; i < 2; i++ {
			c.ops++
			a, err := dialRESP(p.resp, "127.0.0.7", adminToken)
			if err != nil {
				r2Fail(t, c, "the admin during the flood: %v", err)
			} else if v, err := a.do("LH.GET", "other/secret"); err != nil || v.Type != resp.Array {
				r2Fail(t, c, "the admin's LH.GET during the flood: %c%s %v", v.Type, v.Str, err)
				a.nc.Close()
			} else {
				adminOK++
				a.nc.Close()
			}
			time.Sleep(time.Second)
		}
		bound := r2CommandTimeout + slack
		closed, _ := r2Closed(netConns(half), bound-time.Since(start))
		took := time.Since(start)
		for _, h := range half {
			h.nc.Close()
		}
		if closed != len(half) {
			r2Fail(t, c, "%d of %d connections with a half-sent command still open after %s (command timeout %s)", len(half)-closed, len(half), round(took), r2CommandTimeout)
		}
		return fmt.Sprintf("%d connections (one identity) sent `*2 $4 ECHO $N` and not the N bytes (%s): the admin served %d/2 during it; %d closed by the server within %s (command timeout %s); command_timeout closes %v, total_input %v",
			len(half), strings.Join(sent, ", "), adminOK, closed, round(took), r2CommandTimeout,
			p.metric(`leasehold_resp_connections_closed_total{reason="command_timeout"}`),
			p.metric(`leasehold_resp_connections_closed_total{reason="total_input"}`))
	})
}

// r2ShortRecordBody (item 6): conns PUT /v1/records/{key} over HTTP/1.1
// promise 60,000 bytes and send 10: each must be answered or closed
// within --body-timeout (2s here) plus 10s, no record written, the RSS
// under +64 MiB (the polite clients' churn is most of what it grows).
// Before, such a request was never answered (open after 170 s): readValue
// replaced the body deadline with 30 s, then cleared it.
func r2ShortRecordBody(t *testing.T, p *serveProc, conns int) {
	const slack, ceiling = 10 * time.Second, 64 * mib
	r2Row(t, p, "http-record-short-body", ceiling, true, func(c *tally) string {
		ncs := r2HTTPConns(t, p, c, conns, func(i int) string {
			return fmt.Sprintf("PUT /v1/records/tenant-a/rec/%d HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/octet-stream\r\nIf-None-Match: *\r\nContent-Length: 60000\r\n\r\n0123456789",
				i, p.addr, tenantToken)
		})
		c.ops += len(ncs)
		c.faults += len(ncs)
		start := time.Now()
		closed, firsts := r2Closed(ncs, r2BodyTimeout+slack)
		took := time.Since(start)
		if closed != len(ncs) {
			r2Fail(t, c, "%d of %d short record bodies neither answered and closed after %s (body timeout %s): %v", len(ncs)-closed, len(ncs), round(took), r2BodyTimeout, firsts)
		}
		written := 0
		for i := 0; i < len(ncs); i++ {
			res, err := p.do(p.client, request{method: "GET", path: fmt.Sprintf("/v1/records/tenant-a/rec/%d", i), auth: bearer(tenantToken)})
			if err != nil || res.status != 404 {
				written++
				if written <= 3 {
					r2Fail(t, c, "record tenant-a/rec/%d after its short body: %d %v, want 404", i, res.status, err)
				}
			}
		}
		return fmt.Sprintf("%d record PUTs with Content-Length 60000 and 10 bytes sent: %d answered and closed within %s (body timeout %s): %v; records written %d",
			len(ncs), closed, round(took), r2BodyTimeout, firsts, written)
	})
}

// r2AuthLockout (item 7): attackers connections from one address
// pipeline wrong AUTHs (1,000 a second each) for window while a client on
// the same address connects with the good token every 100 ms: each good
// AUTH must be accepted (+OK and a command served); the RSS must stay
// under +64 MiB. Before, ~4 bad AUTHs a second from an address locked out
// every client behind it (15/15 -RATELIMITED).
func r2AuthLockout(t *testing.T, p *serveProc, window time.Duration, attackers int) {
	const src, ceiling = "127.0.0.8", 64 * mib
	r2Row(t, p, "resp-auth-lockout", ceiling, false, func(c *tally) string {
		ctx, stop := context.WithTimeout(context.Background(), window)
		defer stop()
		var wrongAnswers, wrongSent atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < attackers; i++ {
			a, err := dialRESP(p.resp, src, "")
			if err != nil {
				r2Fail(t, c, "attacker %d: %v", i, err)
				continue
			}
			wg.Add(2)
			go func() { // 100 wrong AUTHs every 100 ms
				defer wg.Done()
				var b []byte
				for j := 0; j < 100; j++ {
					b = resp.AppendCommand(b, "AUTH", fmt.Sprintf("guess-%d-%06d", i, j))
				}
				for ; ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
					a.nc.SetWriteDeadline(time.Now().Add(time.Second))
					if _, err := a.nc.Write(b); err != nil {
						if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
							return
						}
						continue
					}
					wrongSent.Add(100)
				}
			}()
			go func() {
				defer wg.Done()
				defer a.nc.Close()
				a.nc.SetReadDeadline(time.Now().Add(window))
				for {
					if _, err := a.rd.ReadValue(); err != nil {
						return
					}
					wrongAnswers.Add(1)
				}
			}()
		}
		var good, refused int
		var refusals []string
		for ctx.Err() == nil {
			good++
			g, err := dialRESP(p.resp, src, tenantToken)
			if err == nil {
				var v resp.Value
				v, err = g.do("LH.GET", "tenant-a/big")
				if err == nil && v.Type != resp.Array {
					err = fmt.Errorf("LH.GET: %c%s", v.Type, v.Str)
				}
				g.nc.Close()
			}
			if err != nil {
				refused++
				if len(refusals) < 3 {
					refusals = append(refusals, err.Error())
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		wg.Wait()
		if refused > 0 {
			r2Fail(t, c, "the good token from the attackers' address refused %d of %d times: %v", refused, good, refusals)
		}
		c.ops += good + int(wrongSent.Load())
		c.faults += int(wrongSent.Load())
		return fmt.Sprintf("%d connections from %s pipelined %d wrong AUTHs for %s (%d answered): the good token from the same address accepted %d of %d times",
			attackers, src, wrongSent.Load(), round(window), wrongAnswers.Load(), good-refused, good)
	})
}
