package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// privateRedis starts a Redis of the test's own (its command counts and
// functions are the test's alone) and returns its URL and a client.
func privateRedis(t *testing.T) (string, *goredis.Client) {
	t.Helper()
	u := enginetest.StartRedis(t).RedisURL()
	opt, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return u, rdb
}

// cmdStats returns INFO commandstats: command -> field -> value
// ("fcall" -> "calls" -> 3).
func cmdStats(t *testing.T, ctx context.Context, rdb *goredis.Client) map[string]map[string]int64 {
	t.Helper()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(k, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		out[name] = map[string]int64{}
		for _, kv := range strings.Split(v, ",") {
			f, n, _ := strings.Cut(kv, "=")
			x, _ := strconv.ParseFloat(n, 64)
			out[name][f] = int64(x)
		}
	}
	return out
}

// exercise runs every kind of store call once (each must succeed) and
// returns the last lease's token.
func exercise(t *testing.T, ctx context.Context, s *redis.Store, name string) uint64 {
	t.Helper()
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if err := s.Renew(ctx, name, "a", rec.Token, time.Minute); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if got, err := s.Get(ctx, name); err != nil || got.Owner != "a" || got.Token != rec.Token {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if l, err := s.List(ctx, name); err != nil || len(l) != 1 || l[0].Token != rec.Token {
		t.Fatalf("List = %+v, %v", l, err)
	}
	if err := s.Release(ctx, name, "a", rec.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	w, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: name, Owner: "b", TTL: time.Minute, RequestID: "r1"})
	if err != nil || w.Token <= rec.Token {
		t.Fatalf("AcquireWait = %+v, %v (after token %d)", w, err, rec.Token)
	}
	if err := s.Release(ctx, name, "b", w.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	key := name + "/rec"
	v, err := s.PutRecord(ctx, key, []byte("x"), 0)
	if err != nil {
		t.Fatalf("PutRecord: %v", err)
	}
	if _, _, err := s.AddCounter(ctx, key+"/n", 2); err != nil {
		t.Fatalf("AddCounter: %v", err)
	}
	if _, err := s.Txn(ctx, leasehold.Txn{
		If:   []leasehold.Condition{{Key: key, Version: v}},
		Then: []leasehold.Write{{Key: key, Value: []byte("y")}},
	}); err != nil {
		t.Fatalf("Txn: %v", err)
	}
	got, err := s.GetRecord(ctx, key)
	if err != nil {
		t.Fatalf("GetRecord: %v", err)
	}
	if err := s.DeleteRecord(ctx, key, got.Version); err != nil {
		t.Fatalf("DeleteRecord: %v", err)
	}
	return w.Token
}

// TestFunctionsUsed: on Redis 7 every operation is a call of the store's
// function library (FCALL, FCALL_RO for reads), loaded by Open; no script
// is sent.
func TestFunctionsUsed(t *testing.T) {
	u, rdb := privateRedis(t)
	ctx := ctxT(t, time.Minute)
	s := open(t, u, redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(0))
	defer s.Close()
	lib, _ := redis.FunctionLibrary()
	libs, err := rdb.FunctionList(ctx, goredis.FunctionListQuery{LibraryNamePattern: lib}).Result()
	if err != nil || len(libs) != 1 || libs[0].Name != lib {
		t.Fatalf("after Open, FUNCTION LIST %s = %+v, %v", lib, libs, err)
	}
	exercise(t, ctx, s, "fn/used")
	st := cmdStats(t, ctx, rdb)
	for _, c := range []string{"evalsha", "eval"} {
		if n := st[c]["calls"]; n != 0 {
			t.Errorf("%s called %d times, want none: %v", c, n, st[c])
		}
	}
	if st["fcall"]["calls"] < 8 || st["fcall_ro"]["calls"] < 2 || st["fcall"]["failed_calls"]+st["fcall"]["rejected_calls"] != 0 {
		t.Errorf("fcall %v, fcall_ro %v: want every operation a call of the library", st["fcall"], st["fcall_ro"])
	}
	if n := st["function|load"]["calls"]; n != 1 {
		t.Errorf("FUNCTION LOAD ran %d times, want once", n)
	}
	if !s.UsesFunctions() {
		t.Error("UsesFunctions() = false")
	}
}

// TestFunctionFlush: the library vanishes under the store (FUNCTION FLUSH;
// a restart without persistence or a failover does the same). The next
// call of each kind loads it again and runs once: one grant, token one
// above the last, no double grant.
func TestFunctionFlush(t *testing.T) {
	u, rdb := privateRedis(t)
	ctx := ctxT(t, time.Minute)
	s := open(t, u, redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(0))
	defer s.Close()
	flush := func() {
		t.Helper()
		if err := rdb.FunctionFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const name = "fn/flush"
	first, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, name, "a", first.Token); err != nil {
		t.Fatal(err)
	}
	flush()
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "b", TTL: time.Minute})
	if err != nil {
		t.Fatalf("TryAcquire after FUNCTION FLUSH: %v", err)
	}
	if rec.Token != first.Token+1 {
		t.Errorf("token %d after %d: want one grant, %d", rec.Token, first.Token, first.Token+1)
	}
	var he *leasehold.HeldError
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "c", TTL: time.Minute}); !errors.As(err, &he) || he.Owner != "b" || he.Token != rec.Token {
		t.Errorf("c's TryAcquire = %v, want held by b with token %d", err, rec.Token)
	}
	st := cmdStats(t, ctx, rdb)
	// Redis 7.0 counts the call that missed its function as failed; the
	// sum holds too for a server that counts it as rejected.
	if st["fcall"]["failed_calls"]+st["fcall"]["rejected_calls"] != 1 || st["function|load"]["calls"] != 2 {
		t.Errorf("fcall %v, function|load %v: want one call that missed its function and one load after Open's", st["fcall"], st["function|load"])
	}
	// Each kind of call recovers by itself, the restart check aside.
	steps := []struct {
		what string
		f    func() error
	}{
		{"Renew", func() error { return s.Renew(ctx, name, "b", rec.Token, time.Minute) }},
		{"Get", func() error { _, err := s.Get(ctx, name); return err }},
		{"List", func() error {
			l, err := s.List(ctx, "fn/")
			if err == nil && len(l) != 1 {
				err = fmt.Errorf("%d leases", len(l))
			}
			return err
		}},
		{"PutRecord", func() error { _, err := s.PutRecord(ctx, "fn/r", []byte("v"), 0); return err }},
		{"Release", func() error { return s.Release(ctx, name, "b", rec.Token) }},
	}
	for _, st := range steps {
		flush()
		if err := st.f(); err != nil {
			t.Errorf("%s after FUNCTION FLUSH: %v", st.what, err)
		}
	}
	// Many calls at once find it missing: each runs once, and they load
	// it fewer times than there are calls.
	flush()
	before := cmdStats(t, ctx, rdb)["function|load"]["calls"]
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := fmt.Sprintf("fn/many/%d", i)
			r, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: n, Owner: "a", TTL: time.Minute})
			if err == nil {
				err = s.Release(ctx, n, "a", r.Token)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent acquire after FUNCTION FLUSH: %v", err)
		}
	}
	if loads := cmdStats(t, ctx, rdb)["function|load"]["calls"] - before; loads < 1 || loads > 16 {
		t.Errorf("%d loads for 16 calls that missed the library", loads)
	}
}

// TestNoFunctions: a server that does not let the store use functions (an
// ACL that denies FUNCTION, or FCALL; Redis before 7.0 has neither) gets
// the same operations as scripts (EVALSHA).
func TestNoFunctions(t *testing.T) {
	u, rdb := privateRedis(t)
	ctx := ctxT(t, time.Minute)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ user, deny string }{
		{"nofunction", "-function"},     // Open's FUNCTION LIST is refused
		{"nofcall", "-fcall -fcall_ro"}, // the library loads, its calls are refused
	} {
		t.Run(c.user, func(t *testing.T) {
			args := []any{"ACL", "SETUSER", c.user, "on", ">pw", "~*", "&*", "+@all"}
			for _, d := range strings.Fields(c.deny) {
				args = append(args, d)
			}
			if err := rdb.Do(ctx, args...).Err(); err != nil {
				t.Fatalf("ACL SETUSER: %v", err)
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			uu := *pu
			uu.User = url.UserPassword(c.user, "pw")
			s := open(t, uu.String(), redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(0))
			defer s.Close()
			exercise(t, ctx, s, "fn/none")
			if s.UsesFunctions() {
				t.Error("UsesFunctions() = true")
			}
			st := cmdStats(t, ctx, rdb)
			if st["evalsha"]["calls"] < 8 || st["fcall"]["calls"] != 0 || st["fcall_ro"]["calls"] != 0 {
				t.Errorf("evalsha %v, fcall %v, fcall_ro %v: want scripts only", st["evalsha"], st["fcall"], st["fcall_ro"])
			}
		})
	}
}

// TestStaleLibrary: libraries of other versions of leasehold stay on a
// server that several versions share: one under an older hashed name, one
// under a name without a hash. The store loads its own beside them and
// never calls theirs.
func TestStaleLibrary(t *testing.T) {
	u, rdb := privateRedis(t)
	ctx := ctxT(t, time.Minute)
	lib, prefix := redis.FunctionLibrary()
	old := "0000000000000000"
	if strings.Contains(lib, old) {
		old = "1111111111111111"
	}
	stale := func(libName, fnPrefix string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "#!lua name=%s\n", libName)
		b.WriteString("local function stale(keys, args) redis.call('INCR', 'stale:calls') return {9} end\n")
		for _, op := range []string{"acquire", "release", "wait", "leave", "renew", "get", "epoch", "records_put", "records_delete", "records_add", "records_txn"} {
			fmt.Fprintf(&b, "redis.register_function('%s%s', stale)\n", fnPrefix, op)
		}
		return b.String()
	}
	for _, code := range []string{
		stale("leasehold_"+old, "lh_"+old+"_"),
		stale("leasehold", "leasehold_"),
	} {
		if err := rdb.FunctionLoad(ctx, code).Err(); err != nil {
			t.Fatalf("loading a stale library: %v", err)
		}
	}
	s := open(t, u, redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(0))
	defer s.Close()
	exercise(t, ctx, s, "fn/stale")
	if n, err := rdb.Get(ctx, "stale:calls").Result(); !errors.Is(err, goredis.Nil) {
		t.Errorf("a stale library's functions ran %s times (%v)", n, err)
	}
	libs, err := rdb.FunctionList(ctx, goredis.FunctionListQuery{}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range libs {
		names = append(names, l.Name)
	}
	sort.Strings(names)
	if want := []string{"leasehold", lib, "leasehold_" + old}; fmt.Sprint(names) != fmt.Sprint(sortedCopy(want)) {
		t.Errorf("libraries %v, want %v", names, sortedCopy(want))
	}
	if st := cmdStats(t, ctx, rdb); st["fcall"]["calls"] < 8 {
		t.Errorf("fcall %v: want the store's own functions (%s*) called", st["fcall"], prefix)
	}
}

func sortedCopy(s []string) []string {
	c := append([]string(nil), s...)
	sort.Strings(c)
	return c
}

// TestReleaseOutOfMemory: with Redis over its maxmemory (and noeviction),
// a release still frees the lease, as it did when it was a script whose
// DEL Redis allowed: its function is flagged allow-oom. A new grant is
// refused.
func TestReleaseOutOfMemory(t *testing.T) {
	u, rdb := privateRedis(t)
	ctx := ctxT(t, time.Minute)
	s := open(t, u, redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(0))
	defer s.Close()
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "oom", Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer rdb.ConfigSet(context.Background(), "maxmemory", "0")
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "oom2", Owner: "a", TTL: time.Minute}); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Errorf("TryAcquire over maxmemory = %v, want an OOM refusal", err)
	}
	if err := s.Release(ctx, "oom", "a", rec.Token); err != nil {
		t.Errorf("Release over maxmemory: %v", err)
	}
	if _, err := s.Get(ctx, "oom"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("Get after the release: %v, want ErrNotFound", err)
	}
}

// TestUncontendedCalls counts the Redis commands that the operations run
// inside Redis (INFO commandstats counts those of functions and scripts):
// an uncontended TryAcquire + Release makes 7 + 4 (the acquire's queue
// check and its look for a resend of a granted call are folded into its
// read of the fence, the release's two EXISTS into one; the release
// records its call's id in the fence, for a resend of it: release.lua),
// and an uncontended AcquireWait 7.
func TestUncontendedCalls(t *testing.T) {
	u, rdb := privateRedis(t)
	ctx := ctxT(t, time.Minute)
	s := open(t, u, redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(0))
	defer s.Close()
	inner := func() (int64, map[string]int64) {
		st := cmdStats(t, ctx, rdb)
		per := map[string]int64{}
		var n int64
		for c, f := range st {
			switch {
			case strings.HasPrefix(c, "fcall"), strings.HasPrefix(c, "eval"), strings.HasPrefix(c, "function"),
				strings.HasPrefix(c, "config"), c == "info", c == "ping", c == "hello", c == "subscribe", strings.HasPrefix(c, "client"):
				continue
			}
			per[c] = f["calls"]
			n += f["calls"]
		}
		return n, per
	}
	const name, pairs = "fn/calls", 20
	pair := func(wait bool) {
		t.Helper()
		req := leasehold.AcquireRequest{Name: name, Owner: "a", TTL: time.Minute}
		var rec leasehold.Record
		var err error
		if wait {
			rec, err = s.AcquireWait(ctx, req)
		} else {
			rec, err = s.TryAcquire(ctx, req)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, name, "a", rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	// Warm up: the name's first grant reads a fence that is not there yet,
	// and the first AcquireWait dials the subscriber's connection, after
	// which the store checks the server again.
	pair(false)
	pair(true)
	for _, c := range []struct {
		wait bool
		want int64
	}{{false, 7 + 4}, {true, 7 + 4}} {
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for range pairs {
			pair(c.wait)
		}
		if n, per := inner(); n != c.want*pairs {
			t.Errorf("wait %v: %d commands in %d pairs (%v), want %d a pair", c.wait, n, pairs, per, c.want)
		}
	}
}

// TestQueueCheckFolded: the acquire skips its look at the queue only when
// the fence says no one can have queued since a grant found the queue
// empty (qd = q). Waiters that another client's script enqueued the way
// every version's wait.lua does (the arrival counter q incremented, the
// entry added), also after the fence was lost, are still not overtaken.
func TestQueueCheckFolded(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	s := f.open()
	enqueue := func(name, id, owner string) {
		t.Helper()
		now, err := f.rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		n, err := f.rdb.HIncrBy(ctx, f.key(name, ":f"), "q", 1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.rdb.ZAdd(ctx, f.key(name, ":q"), goredis.Z{Score: float64(n), Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
		err = f.rdb.HSet(ctx, f.key(name, ":w"), "d:"+id, now.Add(time.Minute).UnixMilli(),
			"r:"+id, fmt.Sprintf("%d\x00%s\x00\x00", time.Minute.Nanoseconds(), owner)).Err()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name      string
		lostFence bool
	}{{"folded/kept", false}, {"folded/lost", true}} {
		rec := f.hold(ctx, s, c.name, "a", time.Minute)
		if err := s.Release(ctx, c.name, "a", rec.Token); err != nil {
			t.Fatal(err)
		}
		if qd, err := f.rdb.HGet(ctx, f.key(c.name, ":f"), "qd").Result(); err != nil || qd != "0" {
			t.Fatalf("%s: fence qd = %q, %v after a grant that found no queue", c.name, qd, err)
		}
		if c.lostFence {
			if err := f.rdb.Del(ctx, f.key(c.name, ":f")).Err(); err != nil {
				t.Fatal(err)
			}
		}
		enqueue(c.name, "w1", "waiter")
		var he *leasehold.HeldError
		_, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: c.name, Owner: "b", TTL: time.Minute})
		if !errors.As(err, &he) || he.Owner != "waiter" {
			t.Errorf("%s: TryAcquire with a waiter queued = %v, want the lease handed to the waiter", c.name, err)
		}
	}
}

// TestRenewFenceCompact: the call ids a name's fence keeps for resends
// (c0..c9, w0..w9, r0..r9) leave it in Redis's compact hash encoding
// under the default hash-max-listpack-value (64 bytes). A renewal field
// keeps four ids; with 16 hex digits each it was 67 bytes, and a grant
// renewed twice or more turned the fence into a hash table: about 3,100
// bytes a name instead of about 850 (the red team's re-check of 18dcbff).
func TestRenewFenceCompact(t *testing.T) {
	u, rdb := privateRedis(t)
	ctx := ctxT(t, time.Minute)
	prefix := uniquePrefix(t)
	s := open(t, u, redis.WithKeyPrefix(prefix), redis.WithHoldback(0))
	defer s.Close()
	cfg, err := rdb.ConfigGet(ctx, "hash-max-listpack-value").Result()
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := strconv.Atoi(cfg["hash-max-listpack-value"]); v != 64 {
		t.Fatalf("hash-max-listpack-value = %q, want Redis's default 64", cfg["hash-max-listpack-value"])
	}
	const name = "compact"
	for range 12 {
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "a", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for range 6 {
			if err := s.Renew(ctx, name, "a", rec.Token, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Release(ctx, name, "a", rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	fence := prefix + "{" + name + "}:f"
	enc, err := rdb.ObjectEncoding(ctx, fence).Result()
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := rdb.MemoryUsage(ctx, fence).Result()
	fields, _ := rdb.HGetAll(ctx, fence).Result()
	t.Logf("fence after 12 grants, each renewed 6 times: %s, %d bytes, %d fields", enc, mem, len(fields))
	if enc != "listpack" {
		t.Errorf("the fence's encoding is %q (%d bytes), want listpack", enc, mem)
	}
	for f, v := range fields {
		if len(v) > 64 {
			t.Errorf("fence field %s is %d bytes: %q", f, len(v), v)
		}
	}
}
