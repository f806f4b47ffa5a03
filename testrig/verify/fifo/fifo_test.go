// Package fifo checks that several `leasehold serve --store URL` servers in
// front of one store that queues waiters itself (Redis, PostgreSQL, etcd,
// another lease server) grant one name's waiters in the order the store
// received them, whichever server each came through (issue 16).
package fifo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/proctest"
	"github.com/leasehold/leasehold/testrig/verify"
)

func TestMain(m *testing.M) {
	verify.MaybeWorker()
	flag.Parse()
	// TestFIFOLongWait's four stores each wait minutes, idle: all at once
	// (t.Parallel runs GOMAXPROCS tests at a time unless -parallel says).
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "4")
	}
	os.Exit(m.Run())
}

const (
	servers = 3 // `leasehold serve --store` processes in front of the store
	waiters = 6 // queued one after another, alternating servers
	// Bounds for a loaded 2-core machine: the test checks order, not speed.
	queuedWithin = 60 * time.Second
	grantWithin  = 60 * time.Second
	leaseTTL     = 30 * time.Second
)

// TestFIFOAcrossServers starts three servers in front of one store, has a
// holder take a lease through the first, then six clients, each on the
// next server in turn (RESP and HTTP alternately), wait for it one after
// another — each starting once the store itself holds the one before in
// its queue (the probe reads the engine) — and has every holder release
// it as soon as it is granted: the grants must come in exactly that
// arrival order, with increasing tokens. The shared
// engines are required in CI (enginetest): a missing one fails the test.
func TestFIFOAcrossServers(t *testing.T) {
	for _, store := range []string{"redis", "postgres", "etcd", "server"} {
		t.Run(store, func(t *testing.T) {
			storeURL, probe := queueStore(t, store)
			runFIFO(t, storeURL, probe, fifoTiming{})
		})
	}
}

// TestFIFOLongWait is TestFIFOAcrossServers with waiters that wait minutes
// (issue 27): the clients wait in long-polls of 30 s, so every waiter's
// poll runs out and is repeated six times or more. The waiters start 5 s
// apart and the holder releases 3 min 2.5 s after the first queued, when
// the first waiter's poll has just run out and the others' have not: a
// waiter that lost its place at a poll's end would be granted last, not
// first. Before the servers kept a waiter's place between polls, the grants
// came in the arrival order rotated by one. The stores run at once.
func TestFIFOLongWait(t *testing.T) {
	for _, store := range []string{"redis", "postgres", "etcd", "server"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			storeURL, probe := queueStore(t, store)
			runFIFO(t, storeURL, probe, fifoTiming{stagger: 5 * time.Second, releaseAfter: 3*time.Minute + 2500*time.Millisecond})
		})
	}
}

// queueStore returns the URL of the store the servers stand in front of (a
// shared engine, or a lease server of its own) and a probe of its queue.
func queueStore(t *testing.T, store string) (string, queueProbe) {
	t.Helper()
	var storeURL string
	var probe queueProbe
	if store == "server" {
		inner := startServe(t, "--data-dir", t.TempDir())
		storeURL, probe = inner.resp, serverProbe(inner.http)
	} else {
		storeURL = enginetest.SharedURL(t, store)
		probe = engineProbe(t, store, storeURL)
	}
	requireQueuer(t, store, storeURL)
	return storeURL, probe
}

// fifoTiming spreads a run over time: each waiter starts stagger after
// the one before was queued, and the holder releases releaseAfter the
// first waiter was queued (at once after the last when zero).
type fifoTiming struct {
	stagger, releaseAfter time.Duration
}

// queueProbe reports whether the store holds a waiter of owner on name in
// its queue (or already granted it the lease), reading the engine itself.
type queueProbe func(ctx context.Context, name, owner string) (bool, error)

// requireQueuer fails the test unless the store at storeURL queues its
// waiters itself (leasehold.Queuer): without that each server keeps its
// own queue and the order across servers is not kept.
func requireQueuer(t *testing.T, store, storeURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := stores.Open(ctx, storeURL)
	if err != nil {
		t.Fatalf("open the %s store: %v", store, err)
	}
	defer st.Close()
	if _, ok := st.(leasehold.Queuer); !ok {
		t.Fatalf("the %s store (%T) does not queue waiters (no AcquireWait, leasehold.Queuer): servers in front of it cannot share one arrival order", store, st)
	}
}

// serverProc is a `leasehold serve` process: its RESP store URL
// (leasehold://) and its HTTP API's base URL.
type serverProc struct{ resp, http string }

// startServe runs `leasehold serve` with args added, as a process of this
// test binary (verify.EnvCLI), until the test ends, and returns once it is
// ready. Its two addresses are taken while both listeners are open, so
// that they differ (two ports asked for one after the other can be the
// same).
func startServe(t *testing.T, args ...string) serverProc {
	t.Helper()
	var addrs []string
	var lns []net.Listener
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	httpAddr, respAddr := addrs[0], addrs[1]
	args = append([]string{"serve", "--addr", httpAddr, "--resp-addr", respAddr, "--log-level", "warn"}, args...)
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), verify.EnvCLI+"="+string(raw))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start leasehold %v: %v", args, err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	proctest.WaitReady(t, "http://"+httpAddr+"/readyz", 60*time.Second)
	return serverProc{resp: "leasehold://" + respAddr, http: "http://" + httpAddr}
}

func runFIFO(t *testing.T, storeURL string, probe queueProbe, timing fifoTiming) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+timing.releaseAfter)
	defer cancel()

	// One holder key for all the servers: a secret issued by one is
	// accepted by the others (docs/server.md, Holder proofs).
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "holder.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var srv []serverProc
	for range servers {
		srv = append(srv, startServe(t, "--store", storeURL, "--holder-key-file", keyFile))
	}

	run := randid.Hex(6)
	name := "fifo-" + run
	// client returns a Client for owner through server i, over RESP or
	// HTTP, with its own connections (a process of its own, as far as the
	// servers can tell).
	client := func(owner string, i int, overHTTP bool) *leasehold.Client {
		t.Helper()
		u := srv[i].resp
		if overHTTP {
			u = srv[i].http
		}
		st, err := stores.Open(ctx, u)
		if err != nil {
			t.Fatalf("open %s: %v", u, err)
		}
		t.Cleanup(func() { st.Close() })
		c, err := leasehold.New(st, leasehold.WithOwner(owner))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	holder, err := client(run+".holder.", 0, false).TryAcquire(ctx, name, leasehold.TTL(leaseTTL))
	if err != nil {
		t.Fatalf("holder: %v", err)
	}

	var (
		mu     sync.Mutex
		grants []string
		tokens []uint64
		errs   []error
		// When each grant reached its client, and when the holder began
		// to release (the holder's first): the handoffs, as clients see
		// them, for the log.
		grantedAt, releasedAt []time.Time
	)
	done := make(chan struct{}, waiters)
	var want []string
	var firstQueued time.Time
	perServer := make([][]string, servers)
	for i := range waiters {
		si := i % servers
		owner := fmt.Sprintf("%s.w%d.s%d.", run, i, si)
		want = append(want, owner)
		perServer[si] = append(perServer[si], owner)
		c := client(owner, si, i%2 == 1)
		go func() {
			defer func() { done <- struct{}{} }()
			l, err := c.Acquire(ctx, name, leasehold.TTL(leaseTTL))
			mu.Lock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", owner, err))
				mu.Unlock()
				return
			}
			grants, tokens = append(grants, owner), append(tokens, l.Token())
			grantedAt = append(grantedAt, time.Now())
			releasedAt = append(releasedAt, time.Now())
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s release: %w", owner, err))
				mu.Unlock()
			}
		}()
		// The next waiter starts once the store holds this one.
		deadline := time.Now().Add(queuedWithin)
		for {
			ok, err := probe(ctx, name, owner)
			if err != nil {
				t.Fatalf("probe the store's queue: %v", err)
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s (on server %d) not in the store's queue after %s", owner, si, queuedWithin)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if i == 0 {
			firstQueued = time.Now()
		}
		if timing.stagger > 0 && i < waiters-1 {
			time.Sleep(timing.stagger)
		}
	}
	if timing.releaseAfter > 0 {
		time.Sleep(time.Until(firstQueued.Add(timing.releaseAfter)))
		t.Logf("releasing after the first waiter waited %s", time.Since(firstQueued).Round(time.Millisecond))
	}

	// Each server lists its own waiters, in arrival order.
	for si, s := range srv {
		if got := serverWaiters(t, s.http, name); !slices.Equal(got, perServer[si]) {
			t.Errorf("server %d lists waiters %v, want %v", si, got, perServer[si])
		}
	}

	mu.Lock()
	releasedAt = append(releasedAt, time.Now())
	mu.Unlock()
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("holder's release: %v", err)
	}
	timeout := time.After(grantWithin)
	for range waiters {
		select {
		case <-done:
		case <-timeout:
			mu.Lock()
			t.Fatalf("after %s only %v were granted, of %v", grantWithin, grants, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		t.Error(err)
	}
	var handoffs []time.Duration
	for i, at := range grantedAt {
		handoffs = append(handoffs, at.Sub(releasedAt[i]))
	}
	slices.Sort(handoffs)
	if len(handoffs) > 0 {
		t.Logf("handoffs (release begun to next grant at its client, across servers): median %s, max %s of %d",
			handoffs[len(handoffs)/2], handoffs[len(handoffs)-1], len(handoffs))
	}
	if !slices.Equal(grants, want) {
		t.Errorf("grants in order\n  %v\nwant the arrival order\n  %v", grants, want)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("tokens %v do not increase", tokens)
			break
		}
	}
	if len(tokens) > 0 && tokens[0] <= holder.Token() {
		t.Errorf("first waiter's token %d after the holder's %d", tokens[0], holder.Token())
	}
	for si, s := range srv {
		if got := serverWaiters(t, s.http, name); len(got) != 0 {
			t.Errorf("server %d still lists waiters %v", si, got)
		}
	}
}

// serverWaiters returns the owners a server lists as waiting on name (GET
// /v1/leases/{name}; none when the lease is not held).
func serverWaiters(t *testing.T, httpURL, name string) []string {
	t.Helper()
	resp, err := http.Get(httpURL + "/v1/leases/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	var body struct {
		Waiters []struct {
			Owner string `json:"owner"`
		} `json:"waiters"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/v1/leases/%s: %d %v", httpURL, name, resp.StatusCode, err)
	}
	var out []string
	for _, w := range body.Waiters {
		out = append(out, w.Owner)
	}
	return out
}

// serverProbe reads the queue of a lease server (the store behind the
// servers under test) through its HTTP API.
func serverProbe(httpURL string) queueProbe {
	return func(ctx context.Context, name, owner string) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", httpURL+"/v1/leases/"+name, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			return false, nil
		}
		var body struct {
			Owner   string `json:"owner"`
			Waiters []struct {
				Owner string `json:"owner"`
			} `json:"waiters"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return false, err
		}
		if body.Owner == owner {
			return true, nil
		}
		for _, w := range body.Waiters {
			if w.Owner == owner {
				return true, nil
			}
		}
		return false, nil
	}
}

// engineProbe reads the engine behind the store: whether anything the
// store keeps for name (Redis: its keys; PostgreSQL: the rows of the
// store's tables; etcd: its keys and values) mentions owner. Each owner is
// unique and no owner contains another, and a waiter's owner is in the
// engine only once the store has queued it (or granted it the lease),
// whatever the store's layout.
func engineProbe(t *testing.T, store, storeURL string) queueProbe {
	t.Helper()
	u, err := url.Parse(storeURL)
	if err != nil {
		t.Fatalf("%s URL: %v", store, err)
	}
	switch store {
	case "redis":
		u.RawQuery = ""
		opt, err := goredis.ParseURL(u.String())
		if err != nil {
			t.Fatalf("redis URL: %v", err)
		}
		rdb := goredis.NewClient(opt)
		t.Cleanup(func() { rdb.Close() })
		return func(ctx context.Context, name, owner string) (bool, error) {
			return redisMentions(ctx, rdb, name, owner)
		}
	case "postgres":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, storeURL)
		if err != nil {
			t.Fatalf("connect to PostgreSQL: %v", err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return func(ctx context.Context, name, owner string) (bool, error) {
			return postgresMentions(ctx, conn, owner)
		}
	case "etcd":
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{u.Host}, DialTimeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("connect to etcd: %v", err)
		}
		t.Cleanup(func() { cli.Close() })
		return func(ctx context.Context, name, owner string) (bool, error) {
			resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
			if err != nil {
				return false, err
			}
			for _, kv := range resp.Kvs {
				if strings.Contains(string(kv.Key), owner) || strings.Contains(string(kv.Value), owner) {
					return true, nil
				}
			}
			return false, nil
		}
	}
	t.Fatalf("no probe for %s", store)
	return nil
}

// redisMentions reports whether a key whose name contains name holds owner
// (in its name, value, fields or members).
func redisMentions(ctx context.Context, rdb *goredis.Client, name, owner string) (bool, error) {
	iter := rdb.Scan(ctx, 0, "*"+name+"*", 10000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		if strings.Contains(key, owner) {
			return true, nil
		}
		typ, err := rdb.Type(ctx, key).Result()
		if err != nil {
			return false, err
		}
		var vals []string
		switch typ {
		case "string":
			v, err := rdb.Get(ctx, key).Result()
			if err != nil && err != goredis.Nil {
				return false, err
			}
			vals = []string{v}
		case "hash":
			m, err := rdb.HGetAll(ctx, key).Result()
			if err != nil {
				return false, err
			}
			for f, v := range m {
				vals = append(vals, f, v)
			}
		case "list":
			vals, err = rdb.LRange(ctx, key, 0, -1).Result()
		case "set":
			vals, err = rdb.SMembers(ctx, key).Result()
		case "zset":
			vals, err = rdb.ZRange(ctx, key, 0, -1).Result()
		case "stream":
			var msgs []goredis.XMessage
			msgs, err = rdb.XRange(ctx, key, "-", "+").Result()
			for _, m := range msgs {
				for f, v := range m.Values {
					vals = append(vals, f, fmt.Sprint(v))
				}
			}
		}
		if err != nil {
			return false, err
		}
		for _, v := range vals {
			if strings.Contains(v, owner) {
				return true, nil
			}
		}
	}
	return false, iter.Err()
}

// postgresMentions reports whether a row of a table in the store's schema
// that has an owner column mentions owner.
func postgresMentions(ctx context.Context, conn *pgx.Conn, owner string) (bool, error) {
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND column_name = 'owner'`)
	if err != nil {
		return false, err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, err
	}
	for _, tbl := range tables {
		var found bool
		q := fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s x WHERE strpos(x::text, $1) > 0)`, pgx.Identifier{tbl}.Sanitize())
		if err := conn.QueryRow(ctx, q, owner).Scan(&found); err != nil {
			if strings.Contains(err.Error(), "does not exist") {
				continue // dropped meanwhile by another test
			}
			return false, err
		}
		if found {
			return true, nil
		}
	}
	return false, nil
}
