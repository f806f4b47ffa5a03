package serverbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/wire/resp"
)

// QueueResult is what MeasureQueue saw.
type QueueResult struct {
	Waiters        int
	Via            string        // "engine" (calls in process) or "RESP server" (pipelined on loopback connections)
	Names          int           // names they wait on
	OnName         int           // waiters on queueName, whose handoffs are checked
	QueueTime      time.Duration // for all of them to be queued
	HeapPerWaiter  float64       // bytes of live heap per queued waiter (after GC)
	StackPerWaiter float64       // bytes of goroutine stack per waiter (each waits in a goroutine of its own)
	RSS            uint64
	Handoffs       int             // releases that handed the lease on, each to the queue's head
	Handoff        []time.Duration // release call to the next holder's durable grant, sorted
}

func (r QueueResult) String() string {
	return fmt.Sprintf("%d waiters queued on %d name(s) through the %s (in %s): heap %.0f B/waiter + goroutine stacks %.0f B/waiter, process RSS %.0f MB; %d handoffs of %d waiters on one name, each to the queue's head, p50 %s / p99 %s",
		r.Waiters, r.Names, r.Via, r.QueueTime.Round(time.Millisecond), r.HeapPerWaiter, r.StackPerWaiter, float64(r.RSS)/1e6,
		r.Handoffs, r.OnName, fmtDur(pct(r.Handoff, 50)), fmtDur(pct(r.Handoff, 99)))
}

// queueName is the name whose handoffs MeasureQueue checks.
const queueName = "queue/0"

// respNames is how many names the waiters over RESP queue on: a RESP
// connection runs the commands on one name one after the other (a second
// wait on a name waits for the first to end), so each of its waits is on
// another name, and each name gets one waiter per connection.
const respNames = 1000

// MeasureQueue queues n waiters on a durable engine in dir, each waiting
// in its own call for up to 5 minutes (server.MaxWait), and measures the
// memory they take. Through the engine, each is a goroutine calling
// Acquire on one name. With overRESP they are LH.ACQUIRE ... WAIT
// commands pipelined on loopback connections to a RESP server with the
// engine behind the quotas of `leasehold serve` with --quota-waiters n:
// each connection waits on respNames names, one wait each, so that
// n/respNames connections carry them (RESPOptions.MaxInflight is 1,024
// commands a connection), and each name has a waiter per connection. Then
// the lease of queueName is released handoffs times while the rest wait:
// every release must hand it to the head of its queue (the order Waiters
// reported), and the time from the release call to the grant's event
// (made once the grant is durable) is measured.
func MeasureQueue(ctx context.Context, dir string, n, handoffs int, overRESP bool) (QueueResult, error) {
	res := QueueResult{Waiters: n, Via: "engine"}
	if overRESP {
		res.Via = "RESP server"
	}
	handoffs = min(handoffs, n)
	type grant struct {
		ev server.Event
		at time.Time
	}
	granted := make(chan grant, 16)
	heap0, stack0 := liveHeap(), stackInuse()
	e, err := server.OpenEngine(server.EngineConfig{Dir: dir, Hooks: server.Hooks{Event: func(ev server.Event) {
		if ev.Type == server.EventGranted && ev.Name == queueName {
			granted <- grant{ev, time.Now()}
		}
	}}})
	if err != nil {
		return res, err
	}
	defer e.Close()
	names := 1
	if overRESP {
		names = min(n, respNames)
	}
	var held leasehold.Record
	for i := range names {
		rec, err := e.Acquire(ctx, server.AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: "queue/" + strconv.Itoa(i), Owner: "first", TTL: time.Hour}})
		if err != nil {
			return res, err
		}
		if i == 0 {
			held = rec
			<-granted
		}
	}
	errs := make(chan error, 1)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	var wg sync.WaitGroup
	var stop func()
	start := time.Now()
	if overRESP {
		stop, err = queueOverRESP(e, n, &wg, fail)
		if err != nil {
			return res, err
		}
	} else {
		for i := range n {
			wg.Go(func() {
				_, err := e.Acquire(ctx, server.AcquireRequest{
					AcquireRequest: leasehold.AcquireRequest{Name: queueName, Owner: "waiter-" + strconv.Itoa(i), TTL: time.Hour},
					Wait:           server.MaxWait,
				})
				if err != nil && !errors.Is(err, leasehold.ErrClosed) {
					fail(err)
				}
			})
		}
		stop = func() {}
	}
	for e.Stats().Waiters < n {
		select {
		case err := <-errs:
			return res, err
		case <-time.After(10 * time.Millisecond):
		}
	}
	res.QueueTime = time.Since(start)
	heap1, stack1 := liveHeap(), stackInuse()
	res.HeapPerWaiter = float64(heap1-min(heap0, heap1)) / float64(n)
	res.StackPerWaiter = float64(stack1-min(stack0, stack1)) / float64(n)
	res.RSS = rss()
	order := e.Waiters(queueName)
	if want := (n + names - 1) / names; len(order) != want {
		return res, fmt.Errorf("queue: %d waiters listed on %s, want %d", len(order), queueName, want)
	}
	res.Names, res.OnName = names, len(order)
	handoffs = min(handoffs, len(order))
	owner, token := held.Owner, held.Token
	for k := range handoffs {
		t0 := time.Now()
		if err := e.Release(ctx, queueName, owner, token); err != nil {
			return res, err
		}
		var g grant
		select {
		case g = <-granted:
		case err := <-errs:
			return res, err
		case <-time.After(time.Minute):
			return res, fmt.Errorf("queue: handoff %d: no grant within a minute", k)
		}
		if g.ev.Owner != order[k].Owner {
			return res, fmt.Errorf("queue: handoff %d went to %s, the queue's head was %s", k, g.ev.Owner, order[k].Owner)
		}
		if w := e.Stats().Waiters; w != n-k-1 {
			return res, fmt.Errorf("queue: %d waiting after handoff %d, want %d", w, k, n-k-1)
		}
		res.Handoff = append(res.Handoff, g.at.Sub(t0))
		res.Handoffs++
		owner, token = g.ev.Owner, g.ev.Token
	}
	slices.Sort(res.Handoff)
	stop()
	if err := e.Close(); err != nil {
		return res, err
	}
	wg.Wait()
	select {
	case err := <-errs:
		return res, err
	default:
	}
	return res, nil
}

// queueOverRESP starts a RESP server for e, with a waiters quota of n for
// its one client (loopback), and pipelines n waits on it, respNames to a
// connection, each on another name. The replies are read and dropped.
// stop shuts it down.
func queueOverRESP(e *server.Engine, n int, wg *sync.WaitGroup, fail func(error)) (stop func(), err error) {
	b := server.WithQuotas(e, server.Quotas{Waiters: n}, nil)
	rs := server.NewRESPServer(b, server.RESPOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go rs.Serve(ln)
	var conns []net.Conn
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rs.Shutdown(ctx)
		for _, c := range conns {
			c.Close()
		}
	}
	wait := strconv.FormatInt(server.MaxWait.Milliseconds(), 10)
	for first := 0; first < n; first += respNames {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			stop()
			return nil, err
		}
		conns = append(conns, c)
		owner := "waiter-" + strconv.Itoa(first/respNames)
		var buf []byte
		for i := first; i < min(n, first+respNames); i++ {
			buf = resp.AppendCommand(buf, "LH.ACQUIRE", "queue/"+strconv.Itoa(i-first), owner, "3600000", "WAIT", wait)
		}
		wg.Go(func() {
			if _, err := c.Write(buf); err != nil {
				fail(err)
			}
		})
		wg.Go(func() {
			r := bufio.NewReader(c)
			line, err := r.ReadString('\n')
			if err == nil && len(line) > 0 && line[0] == '-' && !stopped(line) {
				fail(fmt.Errorf("queue over RESP: %s", line))
			}
			_, _ = io.Copy(io.Discard, r)
		})
	}
	return stop, nil
}

// stopped reports whether a RESP error line is the server going away.
func stopped(line string) bool {
	for _, s := range []string{"-CLOSED", "-ERR server", "-SHUTDOWN"} {
		if len(line) >= len(s) && line[:len(s)] == s {
			return true
		}
	}
	return false
}

func stackInuse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.StackInuse
}
