package redis

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/mutation"
)

// Restart detection. The server a connection reaches can only change when
// a connection is dialled, so the store counts dials (a go-redis dial hook)
// and re-checks the marker before the next TryAcquire after any dial. The
// check is INFO (run_id, uptime, role), CONFIG GET appendonly/appendfsync
// (ignored if refused) and FUNCTION LIST of the store's library (lua.go;
// loaded if missing) in one pipeline, then epoch.lua, which compares the
// run_id with the marker and writes a new marker if it changed. Between
// dials the cached result is used: no extra round trip per operation.
//
// A TryAcquire reads the cache before its script is sent, and go-redis may
// dial a new connection (to a restarted server) while sending it. So after
// a grant, if a dial happened since the cache was read, the store re-checks
// and undoes the grant if it fell inside a hold-back or below a floor it
// did not know of when it sent the script.

// epoch is what TryAcquire passes to acquire.lua.
type epoch struct {
	holdUntil int64  // server ms before which no grant is made (0: none; usually past)
	floor     int64  // tokens granted are at least this
	dials     uint64 // dial count when the cache was valid for it
}

type epochCache struct {
	dials    atomic.Uint64
	checking chan struct{} // holds a token while a check runs: one at a time, waited for within the caller's ctx

	hooked  map[*goredis.Client]bool // cluster node clients with the dial hook (under mu)
	nodesOK bool                     // the cluster's existing nodes are hooked

	mu        sync.Mutex
	valid     bool
	checkedAt uint64 // dial count before the last successful check
	cur       epoch
	runID     string
	replID    string
	durable   bool
	evicts    bool
	replicas  int
	promoted  bool   // the server is a promoted replica: a hold-back is a failover's
	cause     string // why the marker was last written (epoch.lua's cause)
}

// dialCounter is a go-redis hook that counts new connections.
type dialCounter struct{ n *atomic.Uint64 }

func (d dialCounter) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil {
			d.n.Add(1)
		}
		return c, err
	}
}

func (d dialCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (d dialCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// cached returns the cached epoch if it was checked after the last dial,
// and the dial count it compared.
func (c *epochCache) cached() (e epoch, dials uint64, ok bool) {
	dials = c.dials.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.valid && c.checkedAt == dials {
		return c.cur, dials, true
	}
	return epoch{}, dials, false
}

// epoch returns the cached epoch, checking the server first if no check
// has been made since the last dial.
func (s *Store) epoch(ctx context.Context) (epoch, error) {
	if e, _, ok := s.ep.cached(); ok {
		return e, nil
	}
	select {
	case s.ep.checking <- struct{}{}:
	case <-ctx.Done():
		// Another call's check holds the server up (a hung server): the
		// caller's time is up all the same.
		return epoch{}, s.translate(ctx, "restart check", ctx.Err())
	}
	defer func() { <-s.ep.checking }()
	e, d, ok := s.ep.cached() // checked while this call waited?
	if ok {
		return e, nil
	}
	e, sv, err := s.check(ctx)
	if err != nil {
		return epoch{}, s.translate(ctx, "restart check", err)
	}
	e.dials = d
	s.ep.mu.Lock()
	s.ep.valid, s.ep.checkedAt, s.ep.cur = true, d, e
	s.ep.runID, s.ep.replID, s.ep.durable, s.ep.evicts = sv.runID, sv.replID, sv.durable, sv.evicts
	s.ep.replicas, s.ep.promoted, s.ep.cause = sv.replicas, sv.promoted, sv.cause
	s.ep.mu.Unlock()
	return e, nil
}

// invalidateEpoch makes the next epoch call check the server.
func (s *Store) invalidateEpoch() {
	s.ep.mu.Lock()
	s.ep.valid = false
	s.ep.mu.Unlock()
}

// ServerState describes what the store last learnt about its Redis server.
type ServerState struct {
	RunID string // the server's run_id
	// ReplID is the server's master_replid, new at every promotion of a
	// replica (also of a process that was the primary before).
	ReplID string
	// Durable reports that the store skips the hold-back after a
	// restart (but never ends one another client recorded): it was
	// opened with WithNeverReplicated, and the server reports appendonly
	// yes, appendfsync always, on a master that is not a freshly
	// promoted replica, reached directly (not through Sentinel), without
	// replicas now or ever seen in the marker's history. A restart whose
	// data set lacks the marker is held back all the same.
	Durable bool
	// Evicts reports that maxmemory is set with a maxmemory-policy other
	// than noeviction: under memory pressure Redis may then delete leases
	// (a double grant) or fences. False also when CONFIG is refused.
	Evicts bool
	// HoldbackUntil is the server-clock time before which TryAcquire
	// grants nothing: the moment the server may have lost data plus the
	// store's hold-back. Zero when there is no hold-back (a durable
	// server declared never replicated, or WithHoldback(0)); usually in
	// the past.
	HoldbackUntil time.Time
	// TokenFloor is the least token a new grant gets.
	TokenFloor uint64
}

// ServerState checks the server (if a connection was dialled since the
// last check) and reports the restart-detection state, for operators and
// tests.
func (s *Store) ServerState(ctx context.Context) (ServerState, error) {
	if s.closed.Load() {
		return ServerState{}, leasehold.ErrClosed
	}
	e, err := s.epoch(ctx)
	if err != nil {
		return ServerState{}, err
	}
	s.ep.mu.Lock()
	defer s.ep.mu.Unlock()
	st := ServerState{RunID: s.ep.runID, ReplID: s.ep.replID, Durable: s.ep.durable, Evicts: s.ep.evicts, TokenFloor: uint64(e.floor)}
	if e.holdUntil > 0 {
		st.HoldbackUntil = time.UnixMilli(e.holdUntil)
	}
	return st, nil
}

// hookNode adds the dial counter to a cluster node client, once.
func (s *Store) hookNode(c *goredis.Client) {
	s.ep.mu.Lock()
	defer s.ep.mu.Unlock()
	if s.ep.hooked == nil {
		s.ep.hooked = map[*goredis.Client]bool{}
	}
	if !s.ep.hooked[c] {
		s.ep.hooked[c] = true
		c.AddHook(dialCounter{&s.ep.dials})
	}
}

// infoClient is where the restart check runs: the server itself, or on a
// cluster the master that holds the marker key. On a cluster it first
// hooks the node clients that existed before the store (within a check).
func (s *Store) infoClient(ctx context.Context) (goredis.Cmdable, error) {
	cc, ok := s.rdb.(*goredis.ClusterClient)
	if !ok {
		return s.rdb, nil
	}
	if !s.ep.nodesOK {
		err := cc.ForEachShard(ctx, func(_ context.Context, c *goredis.Client) error {
			s.hookNode(c)
			return nil
		})
		if err != nil {
			return nil, err
		}
		s.ep.nodesOK = true
	}
	return cc.MasterForKey(ctx, s.epochKey)
}

// serverFacts is what a check learns besides the epoch.
type serverFacts struct {
	runID    string
	replID   string
	promoted bool // a replica promoted during this process's life
	durable  bool
	evicts   bool
	replicas int    // connected_slaves (-1: unknown)
	cause    string // why the marker was last written (epoch.lua)
}

func (s *Store) check(ctx context.Context) (e epoch, sv serverFacts, err error) {
	c, err := s.infoClient(ctx)
	if err != nil {
		return e, sv, err
	}
	pipe := c.Pipeline()
	srv := pipe.Info(ctx, "server")
	repl := pipe.Info(ctx, "replication")
	conf := []*goredis.MapStringStringCmd{
		pipe.ConfigGet(ctx, "appendonly"), pipe.ConfigGet(ctx, "appendfsync"),
		pipe.ConfigGet(ctx, "maxmemory"), pipe.ConfigGet(ctx, "maxmemory-policy"),
	}
	fnList := pipe.Do(ctx, "FUNCTION", "LIST", "LIBRARYNAME", lua.name)
	_, xerr := pipe.Exec(ctx) // CONFIG and FUNCTION may be refused (ACL, renamed, Redis < 7); judged per command
	err = srv.Err()
	if err == nil && srv.Val() == "" && xerr != nil {
		// The connection's set-up (AUTH, SELECT) failed: go-redis gives
		// its error to Exec only.
		err = xerr
	}
	if err != nil {
		if strings.Contains(err.Error(), "DB index is out of range") {
			return e, sv, s.dbRangeError(ctx)
		}
		return e, sv, err
	}
	var r map[string]string // INFO replication, nil if refused
	if repl.Err() == nil {
		r = parseInfo(repl.Val())
	}
	if r["role"] == "slave" && s.direct() {
		// A writable replica (replica-read-only no) takes grants that
		// its primary never sees: two holders. Through Sentinel a
		// just-demoted node answering so is transient. Refused before
		// the function library is loaded: a read-only replica refused
		// the load (READONLY, not this refusal), a writable one took it.
		return e, sv, &leasehold.InvalidError{Field: "store URL", Reason: fmt.Sprintf(
			"the server is a replica of %s:%s (INFO replication: role:slave); grants on a replica and on its primary overlap: give the primary's address, or use redis+sentinel:// to follow the primary through Sentinel",
			r["master_host"], r["master_port"])}
	}
	if err := s.checkFunctions(ctx, fnList); err != nil {
		return e, sv, err
	}
	info := parseInfo(srv.Val())
	sv.runID = info["run_id"]
	uptime, uerr := strconv.ParseInt(info["uptime_in_seconds"], 10, 64)
	if sv.runID == "" || uerr != nil {
		return e, sv, fmt.Errorf("INFO server has no run_id or uptime_in_seconds")
	}
	cfg := map[string]string{}
	for _, c := range conf {
		for k, v := range c.Val() { // empty if refused
			cfg[k] = v
		}
	}
	replID, promoted := "", false
	sv.replicas = -1 // unknown
	if r != nil {
		// A replica promoted during this process's life (Sentinel's
		// failover, REPLICAOF NO ONE) has a second_repl_offset; its
		// master_replid changes at every promotion, also of a process
		// that was the primary before (failed over and back), whose
		// run_id stays.
		replID = r["master_replid"]
		promoted = r["role"] == "master" && r["second_repl_offset"] != "" && r["second_repl_offset"] != "-1"
		sv.replicas, _ = strconv.Atoi(r["connected_slaves"])
		// Durable: nothing acknowledged is lost in a restart of this
		// process. A replica promoted and then restarted from its own
		// disk looks the same (a master never promoted, a fresh
		// replication id and offset 0 on Redis 7.0, and no node identity
		// survives a restart of a standalone server), and its data may
		// lack what the old primary granted, also when it attached after
		// the last check and so never showed in the marker. Only the
		// user can rule that out (WithNeverReplicated); and no server
		// reached through Sentinel, or seen with replicas, counts as
		// durable (the marker keeps "replicated" for good, see
		// epoch.lua).
		sv.durable = s.neverReplicated && cfg["appendonly"] == "yes" && cfg["appendfsync"] == "always" &&
			r["role"] == "master" && r["second_repl_offset"] == "-1" &&
			sv.replicas == 0 && !s.viaSentinel()
	}
	sv.promoted, sv.replID = promoted, replID
	if promoted {
		// Its data did not start with the process: a marker it lacks was
		// lost in the promotion, now as far as anyone knows.
		uptime = 0
	}
	sv.evicts = cfg["maxmemory"] != "" && cfg["maxmemory"] != "0" &&
		cfg["maxmemory-policy"] != "" && cfg["maxmemory-policy"] != "noeviction"
	holdback := s.holdback
	skip := false                   // the bug of a mutation: no hold-back at all, recorded or not
	if mutation.On("no-holdback") { // the bug: grant at once after a restart (the floor stays)
		holdback, skip = 0, true
	}
	if promoted && mutation.On("promotion-no-holdback") { // the bug: a promoted replica is taken as durable (the floor stays)
		holdback, skip = 0, true
	}
	replicated := sv.replicas > 0 || promoted || s.viaSentinel()
	res, err := s.run(ctx, lua.epoch, []string{s.epochKey}, sv.runID, uptime, holdback.Milliseconds(), replID,
		flag(replicated), flag(sv.durable)).Slice()
	if err != nil {
		return e, sv, err
	}
	if len(res) != 7 {
		return e, sv, fmt.Errorf("epoch script: unexpected reply %v", res)
	}
	since, _ := toInt(res[0])
	until, _ := toInt(res[1])
	e.floor, _ = toInt(res[2])
	if fmt.Sprint(res[5]) == "1" {
		sv.durable = false // the marker's data was seen replicated: see epoch.lua
	}
	sv.cause = fmt.Sprint(res[6])
	if sv.durable {
		holdback = 0
	}
	if !skip {
		// Each client holds back by its own setting from since, and
		// never less than any client recorded (a later restart does not
		// cancel a hold-back another client recorded for a promotion).
		// Usually in the past.
		e.holdUntil = max(until, since+holdback.Milliseconds())
		if holdback == 0 && until <= since {
			e.holdUntil = 0
		}
	}
	return e, sv, nil
}

// dbRangeError says that the configured db does not exist, and how many
// the server has (asked on a connection to db 0; left out if refused).
func (s *Store) dbRangeError(ctx context.Context) error {
	c, ok := s.rdb.(*goredis.Client)
	if !ok {
		return &leasehold.InvalidError{Field: "db", Reason: "out of range on the server"}
	}
	o := *c.Options()
	db := o.DB
	o.DB, o.MaxRetries, o.PoolSize = 0, -1, 1
	c0 := goredis.NewClient(&o)
	defer c0.Close()
	has := ""
	if m, err := c0.ConfigGet(ctx, "databases").Result(); err == nil && m["databases"] != "" {
		has = " (the server has " + m["databases"] + ")"
	}
	return &leasehold.InvalidError{Field: "db", Reason: fmt.Sprintf("db %d is out of range%s", db, has)}
}

// holdbackOwner is the Owner of a hold-back refusal: FailoverHoldbackOwner
// on a promoted replica, ReplicationHoldbackOwner when the marker was
// written for a new replication id under the same run id,
// LostHoldbackOwner on a durable server declared never replicated whose
// marker was missing, HoldbackOwner otherwise.
func (s *Store) holdbackOwner() string {
	s.ep.mu.Lock()
	defer s.ep.mu.Unlock()
	switch {
	case s.ep.promoted:
		return FailoverHoldbackOwner
	case s.ep.cause == "repl":
		return ReplicationHoldbackOwner
	case s.ep.cause == "none" && s.ep.durable:
		return LostHoldbackOwner
	}
	return HoldbackOwner
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// direct reports whether the store reaches one server by its address: a
// plain client, not through Sentinel and not a cluster.
func (s *Store) direct() bool {
	_, ok := s.rdb.(*goredis.Client)
	return ok && !s.viaSentinel()
}

// viaSentinel reports whether the store reaches its server through
// Sentinel (a go-redis failover client), where the node behind it may be
// another one after any reconnection.
func (s *Store) viaSentinel() bool {
	c, ok := s.rdb.(*goredis.Client)
	return ok && c.Options().Addr == "FailoverClient"
}

func parseInfo(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// toInt reads an integer reply element, which RESP may give as an integer
// or as a decimal string.
func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}
