package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/leasehold/leasehold/workflow"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/server/dashboard"
)

const serveLong = `Serve runs the leasehold server: an HTTP/JSON API (with a dashboard at
/dashboard/ and Prometheus metrics at /metrics) and a pipelined RESP
protocol that any Redis client can speak, over one lease state.

By default the state is the server's own durable engine in --data-dir:
every grant is in a group-committed, fsynced log before it is answered,
waiters are queued per name and granted in arrival order (FIFO) by the
release or expiry that frees the lease, and sessions let many leases share
one keepalive. Fencing tokens survive restarts.

With --store URL the server is instead a proxy in front of that store
(postgres://, redis://, dynamodb://, etcd://, sqlite://...): the store
stays the authority, so several servers can share it, and each server adds
sessions, events, the dashboard and metrics. Waiters queue in the store on
Redis, PostgreSQL, etcd and another leasehold server (one arrival order
across every server in front of it), per server on the others.

Every flag can also be set with an environment variable: LEASEHOLD_ and
the flag's name in capitals with '-' as '_' (--rate-limit is
$LEASEHOLD_RATE_LIMIT; --store is $LEASEHOLD_SERVE_STORE, so that a
client's $LEASEHOLD_STORE never turns a server into a proxy of itself). A
flag given on the command line wins.

Auth (--auth-file) is a JSON file of bearer tokens, each with grants of
read, write or admin access on name prefixes; the longest matching prefix
decides. Without it every client may do everything: keep the addresses on
loopback, or put the server behind TLS and auth. See docs/http-api.md.

Holder proofs: every grant comes with a secret, returned only to the
client that acquired it, and renewing or releasing the lease takes that
secret, so a client that can read a lease's owner and token cannot act as
its holder. With auth on the secret is required; with auth off it may be
left out, but a wrong one is refused. The secret is an HMAC under a key in
--holder-key-file (created if missing; keep it private). The engine keeps
it in --data-dir/holder.key by default, so secrets survive restarts. With
--store and no --holder-key-file the key is random: the secrets of leases
held when the server restarts stop matching (their holders can no longer
renew them, and they expire), and servers in front of one store only
accept each other's secrets if they share one key file.

SIGINT or SIGTERM shuts the server down gracefully: it stops accepting,
ends long-polls (waiting clients get 503 and retry), lets other requests
finish for up to --shutdown-timeout and closes the state. A second signal
exits at once.

Exit codes: 0 after a graceful shutdown, 64 usage error (bad flag, auth
file or TLS files), 70 the state or a listener failed.`

const serveExample = `  # A local server with the defaults (HTTP 127.0.0.1:7070, RESP 127.0.0.1:7071).
  leasehold serve

  # Listen on all interfaces with TLS and tokens; RESP off.
  leasehold serve --addr :7070 --resp-addr "" \
      --tls-cert /etc/leasehold/cert.pem --tls-key /etc/leasehold/key.pem \
      --auth-file /etc/leasehold/tokens.json --rate-limit 200 --rate-burst 400

  # Several servers in front of one PostgreSQL database.
  leasehold serve --addr :7070 --store postgres://leasehold@db.internal/app

  # Then, from anywhere:
  curl -s http://127.0.0.1:7070/v1/leases/backup/nightly/acquire \
      --json '{"owner":"host-a","ttl_ms":30000}'`

type serveOptions struct {
	addr, respAddr  string
	dataDir         string
	store           string
	workflows       string
	noSync          bool
	authFile        string
	holderKeyFile   string
	rateLimit       float64
	rateBurst       int
	tlsCert, tlsKey string
	clientCA        string
	logLevel        string
	logFormat       string
	dashboard       bool
	shutdownTimeout time.Duration

	// The hardening bounds (docs/server.md, "Hardening").
	allowedHosts                             []string
	bodyTimeout                              time.Duration
	writeTimeout                             time.Duration
	httpMaxConns                             int
	httpMaxConnsPerAddr                      int
	respMaxConns                             int
	respMaxConnsPerAddr                      int
	respAuthTimeout                          time.Duration
	respCommandTimeout                       time.Duration
	respHandshakeTimeout                     time.Duration
	respMaxOutputBytes                       int64
	respMaxCommandBytes                      int
	respMaxTotalInput                        int64
	respMaxTotalOutput                       int64
	respMaxSubscriptions                     int
	quotaLeases, quotaSessions, quotaWaiters int
	capsGiven                                bool // --http-max-conns or --resp-max-conns set (flag or environment)
	quotaDataBytes                           int64
	maxTombstoneBytes, maxRecordBytes        int64
	respMaxList                              int
	maxBodyBytes                             int64
}

// serveEnv names the environment variable of each flag whose name does not
// simply map to LEASEHOLD_FLAG_NAME.
var serveEnv = map[string]string{"store": "LEASEHOLD_SERVE_STORE"}

func envName(flag string) string {
	if v, ok := serveEnv[flag]; ok {
		return v
	}
	return "LEASEHOLD_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

func newServeCmd(e *env) *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:     "serve [flags]",
		Short:   "Run the lease server (HTTP API, dashboard, metrics, RESP)",
		Long:    serveLong,
		Example: serveExample,
		Args:    cobra.NoArgs,
		RunE: wrapRun(func(cmd *cobra.Command, args []string) error {
			if err := applyEnv(cmd.Flags()); err != nil {
				return err
			}
			o.capsGiven = cmd.Flags().Changed("http-max-conns") || cmd.Flags().Changed("resp-max-conns")
			return o.run(cmd.Context(), e)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", "127.0.0.1:7070", "HTTP listen address (host:port; \"\" disables HTTP)")
	f.StringVar(&o.respAddr, "resp-addr", "127.0.0.1:7071", "RESP listen address (\"\" disables RESP)")
	f.StringVar(&o.dataDir, "data-dir", "", "directory of the engine's log and snapshots (default "+defaultDataDirHint()+")")
	f.StringVar(&o.store, "store", "", "serve a proxy in front of this store URL instead of the engine (env LEASEHOLD_SERVE_STORE)")
	f.BoolVar(&o.noSync, "no-sync", false, "UNSAFE: skip fsync; grants survive a crash of the process but not of the machine, so tokens may repeat after a power loss")
	f.StringVar(&o.authFile, "auth-file", "", "JSON file of bearer tokens and their per-prefix grants (default: auth off)")
	f.StringVar(&o.holderKeyFile, "holder-key-file", "", "file of the key that signs grants' secrets (holder proofs), created (mode 0600) if missing; servers in front of one store must share it (default: holder.key in --data-dir; with --store a random key per process)")
	f.Float64Var(&o.rateLimit, "rate-limit", 0, "sustained requests per second allowed per identity (0: unlimited)")
	f.IntVar(&o.rateBurst, "rate-burst", 0, "requests an identity may send at once above the rate (default: the rate)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate chain: serve HTTPS and RESP over TLS")
	f.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&o.clientCA, "client-ca", "", "PEM CA certificates: require client certificates signed by them (mutual TLS)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug (one line per request), info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.BoolVar(&o.dashboard, "dashboard", true, "serve the dashboard at /dashboard/")
	f.StringVar(&o.workflows, "workflows", "", "JSON file of workflow definitions served at /v1/workflows/ (see docs/workflows.md; strategy pessimistic takes row locks only with --store postgres://, elsewhere it is served as lease, with a warning)")
	durationFlag(f, &o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful shutdown waits for in-flight requests")
	f.StringSliceVar(&o.allowedHosts, "allowed-hosts", nil, "with auth off, HTTP Host names served besides localhost, loopback addresses and the server's own address (comma-separated; \"*\": any); others get 421 (DNS rebinding)")
	durationFlag(f, &o.bodyTimeout, "body-timeout", server.DefaultBodyTimeout, "longest time to receive an HTTP request body, from its headers to its last byte")
	durationFlag(f, &o.writeTimeout, "write-timeout", server.DefaultWriteTimeout, "longest time to send an HTTP response, from its first byte to its last (a client that does not read is disconnected)")
	f.IntVar(&o.httpMaxConns, "http-max-conns", server.DefaultHTTPMaxConns, "most open HTTP connections; more are refused")
	f.IntVar(&o.httpMaxConnsPerAddr, "http-max-conns-per-addr", server.DefaultHTTPMaxConnsPerAddr, "most open HTTP connections from one client IP address")
	f.IntVar(&o.respMaxConns, "resp-max-conns", server.DefaultRESPMaxConns, "most open RESP connections; more are refused")
	f.IntVar(&o.respMaxConnsPerAddr, "resp-max-conns-per-addr", server.DefaultRESPMaxConnsPerAddr, "most open RESP connections from one client IP address")
	durationFlag(f, &o.respAuthTimeout, "resp-auth-timeout", server.DefaultRESPAuthTimeout, "with auth on, a RESP connection that has not sent AUTH within this is closed")
	durationFlag(f, &o.respCommandTimeout, "resp-command-timeout", server.DefaultRESPCommandTimeout, "a RESP command must arrive whole within this of its first byte, or its connection is closed (waiting for the next command is not bounded)")
	durationFlag(f, &o.respHandshakeTimeout, "resp-tls-handshake-timeout", server.DefaultRESPHandshakeTimeout, "longest TLS handshake on the RESP port")
	f.Int64Var(&o.respMaxOutputBytes, "resp-max-output-bytes", server.DefaultRESPMaxOutputBytes, "a RESP client whose unsent replies pass this many bytes (it does not read them) is disconnected")
	f.IntVar(&o.respMaxCommandBytes, "resp-max-command-bytes", server.DefaultRESPMaxCommandBytes, "most bytes of one RESP command's arguments together")
	f.Int64Var(&o.respMaxTotalInput, "resp-max-total-input-bytes", server.DefaultRESPMaxTotalInputBytes, "most bytes of input buffered by all RESP connections together; a connection that would pass it is closed")
	f.IntVar(&o.respMaxSubscriptions, "resp-max-subscriptions", server.DefaultRESPMaxSubscriptions, "most LH.SUBSCRIBE subscriptions of all RESP connections together (one connection: at most 1,024); one more is refused")
	f.Int64Var(&o.respMaxTotalOutput, "resp-max-total-output-bytes", server.DefaultRESPMaxTotalOutputBytes, "most bytes of replies waiting to be sent on all RESP connections together; past it, a connection with more than 1/32 of --resp-max-output-bytes waiting is closed")
	f.IntVar(&o.respMaxList, "resp-max-list", server.DefaultRESPMaxList, "most leases one LH.LIST answers (more: -TOOMANY; LH.SCAN pages through any number)")
	f.Int64Var(&o.maxBodyBytes, "max-body-bytes", server.DefaultMaxBodyBytes, "largest HTTP request body; larger ones get 413")
	f.IntVar(&o.quotaLeases, "quota-leases", server.DefaultQuotaLeases, "most leases one client (identity; with auth off, IP address) holds through this server at once; more: 429 quota-exceeded / -QUOTA (0: no limit)")
	f.Int64Var(&o.quotaDataBytes, "quota-data-bytes", server.DefaultQuotaDataBytes, "most bytes of lease data one client's leases hold together (0: no limit)")
	f.IntVar(&o.quotaSessions, "quota-sessions", server.DefaultQuotaSessions, "most open sessions of one client (0: no limit)")
	f.Int64Var(&o.maxTombstoneBytes, "max-tombstone-bytes", server.DefaultMaxTombstoneBytes, "engine: most bytes of freed grants remembered so that a holder's repeated release still succeeds (each: its name, owner and 340 bytes); past it the oldest are forgotten first, and a release repeated after that is answered not-held")
	f.Int64Var(&o.maxRecordBytes, "max-record-bytes", server.DefaultMaxRecordBytes, "engine: most bytes of versioned records of all clients together (each: its key, value and 96 bytes); a write past it gets 429 quota-exceeded (resource records) and changes nothing; deletes and writes that do not grow the records always pass")
	f.IntVar(&o.quotaWaiters, "quota-waiters", server.DefaultQuotaWaiters, "most acquires of one client waiting in a queue at once (0: no limit)")
	return cmd
}

// applyEnv sets every flag not given on the command line from its
// environment variable, if set.
func applyEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(fl *pflag.Flag) {
		if err != nil || fl.Changed {
			return
		}
		name := envName(fl.Name)
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if serr := fs.Set(fl.Name, v); serr != nil {
			err = usagef("serve: $%s: %v", name, serr)
		}
	})
	return err
}

// defaultDataDir is $XDG_DATA_HOME/leasehold/server, or
// ~/.local/share/leasehold/server (beside the default SQLite store).
func defaultDataDir() (string, error) {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "leasehold", "server"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no default data directory: %w (pass --data-dir)", err)
	}
	return filepath.Join(home, ".local", "share", "leasehold", "server"), nil
}

func defaultDataDirHint() string {
	if d, err := defaultDataDir(); err == nil {
		return d
	}
	return "~/.local/share/leasehold/server"
}

func (o *serveOptions) logger(e *env) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, usagef("serve: --log-level %q: want debug, info, warn or error", o.logLevel)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(e.stderr, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(e.stderr, hopts)), nil
	}
	return nil, usagef("serve: --log-format %q: want text or json", o.logFormat)
}

func (o *serveOptions) run(ctx context.Context, e *env) error {
	log, err := o.logger(e)
	if err != nil {
		return err
	}
	if o.addr == "" && o.respAddr == "" {
		return usagef("serve: --addr and --resp-addr are both empty: nothing to serve")
	}
	if o.rateLimit < 0 || o.rateBurst < 0 {
		return usagef("serve: --rate-limit and --rate-burst must not be negative")
	}
	if o.shutdownTimeout <= 0 {
		return usagef("serve: --shutdown-timeout must be positive")
	}
	if err := o.checkBounds(); err != nil {
		return err
	}
	o.fitConnCaps(fileLimit(), log)
	var auth *server.Auth
	if o.authFile != "" {
		if auth, err = server.LoadAuth(o.authFile); err != nil {
			return usagef("serve: --auth-file: %v", err)
		}
	}
	var limits *server.Limits
	if o.rateLimit > 0 {
		limits = &server.Limits{PerSecond: o.rateLimit, Burst: o.rateBurst}
	}

	// Catch the signals before anything listens, so that a signal never
	// finds the default action (death without a clean shutdown).
	sctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := server.NewMetrics(reg)
	var backend server.Backend
	var what, keyFile string
	if o.store != "" {
		if o.dataDir != "" || o.noSync {
			return usagef("serve: --data-dir and --no-sync are for the engine; with --store the store keeps the state")
		}
		store, err := e.openStore(sctx, o.store)
		if err != nil {
			return err
		}
		scheme, _, _ := strings.Cut(o.store, ":")
		scheme = strings.ToLower(scheme)
		backend = server.NewProxy(store, server.ProxyConfig{
			Hooks: metrics.Hooks(), Logger: log,
			Durable: scheme != "memory" && scheme != "redis",
		})
		what = "proxy in front of " + redact.URL(o.store)
		keyFile = o.holderKeyFile
	} else {
		dir := o.dataDir
		if dir == "" {
			if dir, err = defaultDataDir(); err != nil {
				return usagef("serve: %v", err)
			}
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return exitf(ExitInternal, "serve: data directory: %v", err)
		}
		eng, err := server.OpenEngine(server.EngineConfig{Dir: dir, NoSync: o.noSync, Hooks: metrics.Hooks(), Logger: log,
			MaxTombstoneBytes: o.maxTombstoneBytes, MaxRecordBytes: o.maxRecordBytes})
		if err != nil {
			return exitf(ExitInternal, "serve: %v", err)
		}
		backend = eng
		what = "engine in " + dir
		keyFile = o.holderKeyFile
		if keyFile == "" {
			keyFile = filepath.Join(dir, holderKeyName)
		}
		if o.noSync {
			what += " (--no-sync: NOT durable across a machine crash)"
			log.Warn("--no-sync: grants are not fsynced; after a machine crash tokens may repeat")
		}
	}

	holders, holderLine, err := o.holderProofs(keyFile, auth, log)
	if err != nil {
		backend.Close()
		return err
	}

	var flows map[string]*workflow.Workflows
	if o.workflows != "" {
		if flows, err = loadWorkflows(o.workflows, backend, reg); err != nil {
			backend.Close()
			return usagef("serve: --workflows: %v", err)
		}
		for _, name := range leaseInsteadOfPessimistic(flows) {
			log.Warn("--workflows: strategy pessimistic served as lease: this backend takes no row locks (only a --store postgres:// does); a server killed mid-transition leaves the instance locked for its lease_ttl (10s by default)",
				"workflow", name)
		}
	}

	cfg := server.Config{
		Workflows: flows,
		Addr:      o.addr, RESPAddr: o.respAddr,
		TLSCert: o.tlsCert, TLSKey: o.tlsKey, ClientCA: o.clientCA,
		Auth: auth, Limits: limits, Logger: log, Metrics: metrics,
		Quotas: server.Quotas{
			Leases: noQuotaIfZero(o.quotaLeases), DataBytes: noQuotaIfZero(o.quotaDataBytes),
			Sessions: noQuotaIfZero(o.quotaSessions), Waiters: noQuotaIfZero(o.quotaWaiters),
		},
		Holders:         holders,
		ShutdownTimeout: o.shutdownTimeout,
		AllowedHosts:    o.allowedHosts, BodyTimeout: o.bodyTimeout, WriteTimeout: o.writeTimeout, MaxBodyBytes: o.maxBodyBytes,
		HTTPMaxConns: o.httpMaxConns, HTTPMaxConnsPerAddr: o.httpMaxConnsPerAddr,
		RESP: server.RESPOptions{
			MaxConns: o.respMaxConns, MaxConnsPerAddr: o.respMaxConnsPerAddr,
			AuthTimeout: o.respAuthTimeout, HandshakeTimeout: o.respHandshakeTimeout, CommandTimeout: o.respCommandTimeout,
			MaxOutputBytes: o.respMaxOutputBytes, MaxCommandBytes: o.respMaxCommandBytes,
			MaxTotalInputBytes: o.respMaxTotalInput, MaxTotalOutputBytes: o.respMaxTotalOutput, MaxSubscriptions: o.respMaxSubscriptions, MaxList: o.respMaxList,
		},
	}
	if o.dashboard {
		cfg.Dashboard = dashboard.Handler()
	}
	srv, err := server.NewServer(backend, cfg)
	if err != nil {
		backend.Close()
		if errors.Is(err, server.ErrConfig) {
			return usagef("serve: %v", err)
		}
		return exitf(ExitInternal, "serve: %v", err)
	}
	scheme := "http"
	if srv.TLS() {
		scheme = "https"
	}
	fmt.Fprintf(e.stdout, "leasehold: state: %s\n", what)
	fmt.Fprintf(e.stdout, "leasehold: holder proofs: %s\n", holderLine)
	if a := srv.HTTPAddr(); a != nil {
		fmt.Fprintf(e.stdout, "leasehold: HTTP API on %s://%s/v1/", scheme, a)
		if o.dashboard {
			fmt.Fprintf(e.stdout, " (dashboard %s://%s/dashboard/)", scheme, a)
		}
		fmt.Fprintln(e.stdout)
	}
	if a := srv.RESPAddr(); a != nil {
		fmt.Fprintf(e.stdout, "leasehold: RESP on %s", a)
		if srv.TLS() {
			fmt.Fprint(e.stdout, " (TLS)")
		}
		fmt.Fprintln(e.stdout)
	}
	if auth == nil {
		fmt.Fprintln(e.stdout, "leasehold: auth is off (--auth-file): every client may do everything")
	}
	// After the first signal, a second one gets the default action.
	go func() {
		<-sctx.Done()
		stopSignals()
	}()
	if err := srv.Run(sctx); err != nil {
		return exitf(ExitInternal, "serve: %v", err)
	}
	fmt.Fprintln(e.stdout, "leasehold: stopped")
	return nil
}

// holderKeyName is the holder key's file in the engine's data directory.
const holderKeyName = "holder.key"

// holderProofs loads (or creates) the holder key in keyFile, or, if
// keyFile is empty (a proxy without --holder-key-file), makes a random
// one and logs what that means. Secrets are required when auth is on.
// It also returns the start-up line that says where the key is.
func (o *serveOptions) holderProofs(keyFile string, auth *server.Auth, log *slog.Logger) (*server.HolderProofs, string, error) {
	var p *server.HolderProofs
	var line string
	if keyFile == "" {
		p = server.RandomHolderProofs()
		line = "random key (no --holder-key-file)"
		log.Warn("holder proofs: no --holder-key-file, so grants' secrets are signed with a random key: " +
			"the secrets of leases held when this server restarts stop matching (their holders cannot renew or release them; they expire), " +
			"and several servers in front of one store must share one key file")
	} else {
		var err error
		if p, err = server.LoadHolderKey(keyFile); err != nil {
			return nil, "", usagef("serve: --holder-key-file: %v", err)
		}
		line = "key in " + keyFile
		if fi, err := os.Stat(keyFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn("holder proofs: the key file is readable by others; whoever reads it can act as any lease's holder (chmod 600 it)",
				"file", keyFile, "mode", fi.Mode().Perm().String())
		}
	}
	p.Required = auth.Enabled()
	if p.Required {
		line += "; secrets required"
	} else {
		line += "; secrets checked when given (auth is off)"
	}
	return p, line, nil
}

// checkBounds refuses hardening flags that would turn a bound off or make
// no sense.
func (o *serveOptions) checkBounds() error {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"--body-timeout", o.bodyTimeout > 0},
		{"--write-timeout", o.writeTimeout > 0},
		{"--http-max-conns", o.httpMaxConns > 0},
		{"--http-max-conns-per-addr", o.httpMaxConnsPerAddr > 0},
		{"--resp-max-conns", o.respMaxConns > 0},
		{"--resp-max-conns-per-addr", o.respMaxConnsPerAddr > 0},
		{"--resp-auth-timeout", o.respAuthTimeout > 0},
		{"--resp-command-timeout", o.respCommandTimeout > 0},
		{"--resp-tls-handshake-timeout", o.respHandshakeTimeout > 0},
		{"--resp-max-output-bytes", o.respMaxOutputBytes > 0},
		{"--resp-max-command-bytes", o.respMaxCommandBytes > 0},
		{"--resp-max-total-input-bytes", o.respMaxTotalInput > 0},
		{"--resp-max-total-output-bytes", o.respMaxTotalOutput > 0},
		{"--resp-max-subscriptions", o.respMaxSubscriptions > 0},
		{"--resp-max-list", o.respMaxList > 0},
		{"--max-body-bytes", o.maxBodyBytes > 0},
		{"--max-tombstone-bytes", o.maxTombstoneBytes > 0},
		{"--max-record-bytes", o.maxRecordBytes > 0},
	} {
		if !c.ok {
			return usagef("serve: %s must be positive", c.name)
		}
	}
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"--quota-leases", o.quotaLeases >= 0},
		{"--quota-data-bytes", o.quotaDataBytes >= 0},
		{"--quota-sessions", o.quotaSessions >= 0},
		{"--quota-waiters", o.quotaWaiters >= 0},
	} {
		if !c.ok {
			return usagef("serve: %s must be 0 (no limit) or positive", c.name)
		}
	}
	if o.maxTombstoneBytes > 0 && o.maxTombstoneBytes < server.MinTombstoneBytes {
		return usagef("serve: --max-tombstone-bytes %d: it must hold at least one freed grant of the longest name and owner (%d bytes)", o.maxTombstoneBytes, server.MinTombstoneBytes)
	}
	for _, h := range o.allowedHosts {
		port := strings.Contains(h, ":") && net.ParseIP(strings.Trim(h, "[]")) == nil
		if h == "" || port || strings.ContainsAny(h, "/ \t@?#") {
			return usagef("serve: --allowed-hosts: %q is not a host name (give names such as leases.internal, without scheme, port or path)", h)
		}
	}
	return nil
}

// noQuotaIfZero maps a --quota-* flag's 0 (no limit) to server.NoQuota.
func noQuotaIfZero[T ~int | ~int64](v T) T {
	if v == 0 {
		return server.NoQuota
	}
	return v
}

// fdReserve is the open files kept for everything but client connections:
// the engine's log and snapshots, the listeners, a store's connections.
const fdReserve = 512

// fitConnCaps keeps the connection caps of the ports served within the
// process's file limit. Above it, accept fails (too many open files)
// before a cap refuses or evicts anyone, and every newcomer waits: the
// review of issue 26 filled a server whose limit (20,000) equalled the
// default caps' sum, and polite clients on both ports timed out. Default
// caps are lowered in proportion, with a line in the log; caps given
// explicitly are kept, with a warning.
func (o *serveOptions) fitConnCaps(limit uint64, log *slog.Logger) {
	var need uint64
	if o.addr != "" {
		need += uint64(o.httpMaxConns)
	}
	if o.respAddr != "" {
		need += uint64(o.respMaxConns)
	}
	if limit == 0 || need == 0 || need+fdReserve <= limit {
		return
	}
	room := limit / 2
	if limit > 2*fdReserve {
		room = limit - fdReserve
	}
	if o.capsGiven {
		log.Warn("the connection caps add up to more than the open-file limit allows: at the limit new connections wait or fail (accept: too many open files) before a cap refuses or evicts anyone; raise the limit (ulimit -n) or lower the caps",
			"open_file_limit", limit, "http_max_conns", o.httpMaxConns, "resp_max_conns", o.respMaxConns)
		return
	}
	scale := func(c int) int { return max(1, int(uint64(c)*room/need)) }
	o.httpMaxConns, o.respMaxConns = scale(o.httpMaxConns), scale(o.respMaxConns)
	o.httpMaxConnsPerAddr, o.respMaxConnsPerAddr = min(o.httpMaxConnsPerAddr, o.httpMaxConns), min(o.respMaxConnsPerAddr, o.respMaxConns)
	log.Info("connection caps lowered to fit the open-file limit (raise it with ulimit -n for more)",
		"open_file_limit", limit, "http_max_conns", o.httpMaxConns, "resp_max_conns", o.respMaxConns)
}
