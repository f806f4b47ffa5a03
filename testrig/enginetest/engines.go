package enginetest

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// Kind says how the tests get a store's server.
type Kind int

const (
	// Embedded stores run inside their clients, on a file: no server.
	Embedded Kind = iota
	// External stores talk to an engine program: a shared test server
	// that scripts/engines.sh starts (URLVar), and private ones that a test
	// may kill and restart (Start).
	External
	// LeaseServer is `leasehold serve`, which the verification suites
	// start from their own test binaries (testrig/verify).
	LeaseServer
)

// Engine is one store the tests run on: its row in Engines.
type Engine struct {
	Store string // store name: its URL scheme and its verification target's name
	Title string // what messages call the engine ("PostgreSQL")
	Kind  Kind
	// URLVar is the environment variable holding the store URL of the
	// shared test server, and BinVar the one naming the program that
	// starts a private server (External only). scripts/engines.sh exports
	// both.
	URLVar, BinVar string
	// start starts a private server of this engine (External only); see
	// Engine.Start.
	start func(t testing.TB, e Engine, extra ...string) *Server
	// Durable are the extra arguments with which a private server keeps
	// every acknowledged write across a SIGKILL (nil: none needed).
	Durable func(t testing.TB) []string
	// DurableParam is the URL query (with its "?") that tells the store
	// a Durable server is a single node never replicated, so that its
	// restarts need not be held back ("": none needed). For Redis it
	// also sets a short hold-back: the store holds back a fresh server's
	// first use (its data set has no marker yet, as after a lost one) for
	// a hold-back from the server's start, and the suites' durable server
	// never loses its data, so 30 s (the default) at every start of a
	// target would only lengthen the suites.
	DurableParam string
	// URL is the store URL of a private server at addr (host:port); for
	// an Embedded store, of a store in directory addr.
	URL func(addr string) string
	// Init: the store must be initialised (stores.Init: its table
	// created) before its clients first open it.
	Init bool

	// What the suites adapt to.

	// MinTTL is the shortest lease TTL the store keeps exactly (a shorter
	// one stays held for MinTTL); zero: no minimum.
	MinTTL time.Duration
	// SameClock is the URL parameter (with its "&") that tells the store
	// that all its clients share one machine's clock, so that a takeover
	// need not wait out a clock skew between them.
	SameClock string
	// Sessions: the store binds leases to a client's session (its
	// connection) and frees them when the session ends.
	Sessions bool
	// ExtendsOnRecovery: by design, a restarted server gives every lease
	// it recovers its full TTL again from the moment of recovery (see
	// testrig/verify/crash).
	ExtendsOnRecovery bool
}

// Engines is the one table of the stores the tests know: the verification
// targets (testrig/verify.StartTarget, AllStores) and this package's
// helpers (SharedURL, Engine.Start and the Start functions) read it. Adding a store to the
// tests is adding its row here, and, for an External engine, a start_
// function in scripts/engines.sh (the shell starter of the shared test
// servers, which CI and scripts/test.sh run) that exports the row's URLVar
// and BinVar; TestEnginesShExportsTheTable checks that it does.
var Engines = []Engine{
	{Store: "sqlite", Title: "SQLite", Kind: Embedded,
		URL: func(dir string) string { return "sqlite://" + filepath.Join(dir, "leases.db") }},
	{Store: "redis", Title: "Redis", Kind: External,
		URLVar: "LEASEHOLD_TEST_REDIS", BinVar: "LEASEHOLD_TEST_REDIS_SERVER",
		start:        startRedis,
		Durable:      func(testing.TB) []string { return []string{"--appendonly", "yes", "--appendfsync", "always"} },
		DurableParam: "?never_replicated=true&holdback=1s",
		URL:          func(addr string) string { return "redis://" + addr + "/0" }},
	{Store: "postgres", Title: "PostgreSQL", Kind: External,
		URLVar: "LEASEHOLD_TEST_POSTGRES", BinVar: "LEASEHOLD_TEST_PG_BIN",
		start: startPostgres,
		URL: func(addr string) string {
			return "postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=5"
		}},
	{Store: "dynamodb", Title: "DynamoDB (dynalite)", Kind: External,
		URLVar: "LEASEHOLD_TEST_DYNAMODB", BinVar: "LEASEHOLD_TEST_DYNALITE",
		start:   startDynalite,
		Durable: func(t testing.TB) []string { return []string{"--path", t.TempDir()} },
		URL: func(addr string) string {
			return "dynamodb://lh_verify?endpoint=http://" + addr + "&region=us-east-1"
		},
		Init: true, SameClock: "&max_clock_skew=50ms"},
	{Store: "etcd", Title: "etcd", Kind: External,
		URLVar: "LEASEHOLD_TEST_ETCD", BinVar: "LEASEHOLD_TEST_ETCD_BIN",
		start: startEtcd,
		URL:   func(addr string) string { return "etcd://" + addr },
		// etcd keeps whole-second TTLs of 2 s and more; a member that
		// becomes leader gives every lease its full TTL again.
		MinTTL: 2 * time.Second, ExtendsOnRecovery: true},
	{Store: "server", Title: "leasehold serve", Kind: LeaseServer,
		URL: func(addr string) string { return "leasehold://" + addr },
		// Its engine does not log the renewals that keep a TTL, so it
		// cannot know how much of a recovered lease was left.
		Sessions: true, ExtendsOnRecovery: true},
}

// Lookup returns the row of store in Engines.
func Lookup(store string) (Engine, bool) {
	i := slices.IndexFunc(Engines, func(e Engine) bool { return e.Store == store })
	if i < 0 {
		return Engine{}, false
	}
	return Engines[i], true
}

// Stores returns the names of the stores in Engines, in its order.
func Stores() []string {
	var out []string
	for _, e := range Engines {
		out = append(out, e.Store)
	}
	return out
}

// SharedURL returns the store URL of the shared test server of store (an
// External engine, from its URLVar); without one, see [Missing].
func SharedURL(t testing.TB, store string) string {
	t.Helper()
	e, ok := Lookup(store)
	if !ok || e.URLVar == "" {
		t.Fatalf("enginetest: %q has no shared test server (stores: %v)", store, Stores())
	}
	return envOrMissing(t, e.URLVar, e.Title)
}

// Start starts a private server of an External engine with extra
// arguments on its command line, and kills it when the test ends; see
// Server. Without the engine's program, see [Missing].
func (e Engine) Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	if e.start == nil {
		t.Fatalf("enginetest: %s has no private server", e.Store)
	}
	return e.start(t, e, extra...)
}

// mustLookup is Lookup for the names this package uses itself.
func mustLookup(store string) Engine {
	e, ok := Lookup(store)
	if !ok {
		panic(fmt.Sprintf("enginetest: no %q in Engines", store))
	}
	return e
}
