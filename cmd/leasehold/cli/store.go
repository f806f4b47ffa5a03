package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/stores"
)

// The store's errors say what failed, in one line; go-redis's pool would
// add its own lines about each dial and retry.
func init() { redis.DiscardClientLogs() }

// connectTimeoutUsage is the help of the global --connect-timeout flag.
const connectTimeoutUsage = "how long (seconds or a duration: 5, 2.5, 10s) opening the store may take before the command gives up (exit 70); a store URL's connect_timeout= parameter overrides it"

// connectTimeout is the value of --connect-timeout: a positive duration
// (parseSeconds: bare seconds too),
// zero until set (openStore then uses stores.DefaultConnectTimeout).
type connectTimeout time.Duration

func (c *connectTimeout) String() string {
	if *c == 0 {
		return stores.DefaultConnectTimeout.String()
	}
	return time.Duration(*c).String()
}

func (c *connectTimeout) Type() string { return "duration" }

func (c *connectTimeout) Set(s string) error {
	d, err := parseSeconds(s)
	if err != nil || d <= 0 {
		return fmt.Errorf("%q is not a positive number of seconds (5, 2.5) or duration (5s, 1m)", s)
	}
	*c = connectTimeout(d)
	return nil
}

// openSignals end the opening of a store; the command then exits 128+N.
var openSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// probeName is the lease name read once from a store that does not
// contact its engine when opened; it need not exist.
const probeName = "leasehold/connect-check"

// openStore opens the store named by url (from --store; empty: the value
// of $LEASEHOLD_STORE, else the default SQLite file). Opening is bounded
// by the URL's connect_timeout= if it has one, else by --connect-timeout
// (default stores.DefaultConnectTimeout), and is ended by SIGINT or
// SIGTERM (exit 128+N). A store that sends nothing when opened (the
// server's, http:// and leasehold://) is asked once for a lease under the
// same bounds, so that a server that accepts connections but never
// answers is found here rather than by the command's first operation.
// Errors name the store, with its secrets redacted, and say when it came
// from the environment.
func (e *env) openStore(ctx context.Context, url string) (leasehold.Store, error) {
	return e.openWith(ctx, url, e.open, openSignals)
}

// openStoreOn is openStore ended by the signals watch (those that run,
// elect or hold handle) rather than only by SIGINT and SIGTERM.
func (e *env) openStoreOn(ctx context.Context, url string, watch []os.Signal) (leasehold.Store, error) {
	return e.openWith(ctx, url, e.open, watch)
}

// openExistingStore is openStore for the commands that only read a store
// or release in it (status, release, force-release): a SQLite store that
// does not exist is not created. Named by --store or $LEASEHOLD_STORE, it
// is a usage error; the default file, not yet made by any run or hold, is
// an empty store (an empty memory store stands in for it).
func (e *env) openExistingStore(ctx context.Context, url string) (leasehold.Store, error) {
	open := e.openExisting
	if open == nil {
		open = e.open
	}
	if url == "" && os.Getenv(stores.EnvStore) == "" {
		open = func(ctx context.Context, url string) (leasehold.Store, error) {
			s, err := e.openExisting(ctx, url)
			var nse *stores.NoStoreError
			if errors.As(err, &nse) {
				return memory.New(), nil
			}
			return s, err
		}
	}
	return e.openWith(ctx, url, open, openSignals)
}

// openWith is openStore with the opener open, ended by the signals watch.
func (e *env) openWith(ctx context.Context, url string, open func(context.Context, string) (leasehold.Store, error), watch []os.Signal) (leasehold.Store, error) {
	return e.connect(ctx, url, "open store", true, watch, func(ctx context.Context, url string) (leasehold.Store, error) {
		s, err := open(ctx, url)
		if err != nil {
			return nil, err
		}
		switch s.(type) {
		case *remote.HTTPStore, *remote.RESPStore:
			// Only the end of ctx and a server not reached count: any
			// answer, even an error, shows the server is there, and the
			// command's own operation reports that error better. A
			// refused connection is a store that cannot be opened, which
			// a wait tries again (openWaiting): the HTTP store connects
			// only at its first request, so run -w 3 exited 70 at once
			// at its first attempt (issue 29's red team, #2).
			if _, perr := s.Get(ctx, probeName); perr != nil && (ctx.Err() != nil || notReached(perr)) {
				s.Close()
				return nil, perr
			}
		}
		return s, nil
	})
}

// notReached reports whether err is a failure to connect: nothing was
// sent (a refused connection, no route, an unknown host). Some engines'
// clients (Redis, PostgreSQL) put the dial's error into their own text.
func notReached(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "dial tcp") || strings.Contains(msg, "dial unix") || strings.Contains(msg, "dial error")
}

// connect runs f, which opens or initialises the store named by url, as
// openStore describes; what (as "open store") starts its messages. With
// bound false only a connect_timeout= of the URL bounds it, not the
// default of --connect-timeout. The signals watch (those not ignored) end
// it with 128+N.
func (e *env) connect(ctx context.Context, url, what string, bound bool, watch []os.Signal, f func(ctx context.Context, url string) (leasehold.Store, error)) (leasehold.Store, error) {
	name := "the default store"
	if p, err := stores.DefaultPath(); err == nil {
		name += " sqlite://" + p
	}
	if url != "" {
		name = redact.URL(url)
	} else if url = os.Getenv(stores.EnvStore); url != "" {
		name = "$" + stores.EnvStore + "=" + redact.URL(url)
	}
	d, source := time.Duration(e.connectTimeout), "--connect-timeout"
	if d <= 0 {
		d = stores.DefaultConnectTimeout
	}
	if ud, ok, err := stores.ConnectTimeout(url); err != nil && url != "" {
		return nil, classify(err, "%s %s", what, name)
	} else if ok {
		d, source, bound = ud, "connect_timeout=", true
	}

	tctx, cancelTimeout := ctx, context.CancelFunc(func() {})
	if bound {
		tctx, cancelTimeout = context.WithTimeout(ctx, d)
	}
	defer cancelTimeout()
	octx, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)
	var watched []os.Signal
	for _, sig := range watch {
		if !signal.Ignored(sig) {
			watched = append(watched, sig)
		}
	}
	sigs, stop, stopped := make(chan os.Signal, 1), make(chan struct{}), make(chan struct{})
	signalled := make(chan struct{}) // closed after a signal cancelled octx
	if len(watched) > 0 {
		signal.Notify(sigs, watched...)
	}
	go func() {
		defer close(stopped)
		select {
		case sig := <-sigs:
			cancel(&signalError{sig})
			close(signalled)
		case <-stop:
		}
	}()
	defer func() {
		signal.Stop(sigs)
		close(stop)
		<-stopped
	}()

	// Engines honour a deadline promptly but may notice a cancellation
	// only at their next timeout (go-redis in a read), so a signal does
	// not wait for f: it goes on in the background and its store, if it
	// makes one, is closed.
	type opened struct {
		s   leasehold.Store
		err error
	}
	result := make(chan opened, 1)
	go func() {
		s, err := f(octx, url)
		result <- opened{s, err}
	}()
	// A wait that ran out (run, hold --wait) leaves f behind too, after
	// abandonGrace: a stopped server may hold it until its own timeouts.
	abandon, stopAbandon := waitAbandon(ctx)
	defer stopAbandon()
	var s leasehold.Store
	var err error
	left := true
	select {
	case r := <-result:
		s, err, left = r.s, r.err, false
	case <-signalled:
		err = context.Cause(octx)
	case <-abandon:
		err = errStoreStuck
	}
	if left {
		go func() {
			if r := <-result; r.s != nil {
				r.s.Close()
			}
		}()
	}
	if err == nil {
		return s, nil
	}
	err = redact.Error(err, redact.Secrets(url)...)
	var se *signalError
	var nse *stores.NoStoreError
	switch {
	case errors.As(err, &nse):
		return nil, exitf(ExitUsage, "%s %s: %v; a first run or hold creates it, or \"leasehold store init\"", what, name, err)
	case errors.As(context.Cause(octx), &se):
		return nil, exitf(signalExitCode(se.sig), "%s while %s %s", se.sig, gerund(what), name)
	case errors.Is(context.Cause(ctx), errWaitTimeout):
		return nil, &waitOpenError{what: what + " " + name, err: err}
	case bound && ctx.Err() == nil && errors.Is(tctx.Err(), context.DeadlineExceeded):
		msg := err.Error()
		if !strings.Contains(msg, "no answer within") {
			msg = fmt.Sprintf("no answer within %s: %s", d, msg)
		}
		return nil, &exitError{code: ExitInternal, msg: fmt.Sprintf("%s %s: %s (raise %s if it is only slow)", what, name, msg, source), unreachable: true}
	}
	cerr := classify(err, "%s %s", what, name)
	if ee, ok := cerr.(*exitError); ok && ee.code == ExitInternal && notReached(err) {
		ee.unreachable = true
	}
	return nil, cerr
}

// attemptTimeout bounds run's first attempt to take the lease (with -n,
// its only one): the bound of opening the store, which the URL's
// connect_timeout= or --connect-timeout set; source names it.
func (e *env) attemptTimeout(url string) (time.Duration, string) {
	d, source := time.Duration(e.connectTimeout), "--connect-timeout"
	if d <= 0 {
		d = stores.DefaultConnectTimeout
	}
	if url == "" {
		url = os.Getenv(stores.EnvStore)
	}
	if ud, ok, err := stores.ConnectTimeout(url); err == nil && ok {
		d, source = ud, "connect_timeout="
	}
	return d, source
}

// slowStoreHint is what an operation that got no answer in time says
// about the store named by url: for PostgreSQL, the commit that waits for
// a synchronous standby that is down.
func slowStoreHint(url string) string {
	if url == "" {
		url = os.Getenv(stores.EnvStore)
	}
	if strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://") {
		return "; a PostgreSQL primary with synchronous replication (synchronous_standby_names) whose synchronous standby is down makes every commit wait until the standby is back or the setting is changed"
	}
	return ""
}

// gerund turns "open store" into "opening", "store init" into
// "initialising", for the line a signal ends them with.
func gerund(what string) string {
	if what == "store init" {
		return "initialising"
	}
	return "opening"
}

const storeInitLong = `Init prepares a store for leasehold ahead of time: it creates the tables
(or schema, or file) that the store would otherwise create when it is first
opened, so that operators can run it once with rights the applications do
not need. It is safe to run again.

The store is named by --store, else by $` + stores.EnvStore + `, else it is the
default SQLite file. Creating a table can take a while, so only an explicit
--connect-timeout or the URL's connect_timeout= limits how long it may take;
Ctrl-C or SIGTERM ends it.

Exit codes: 0 success, 64 usage error, 70 store error, 128+N signal N.`

func newStoreCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Manage a store",
		Long: `Store acts on the store itself rather than on its leases. Today it has one
subcommand:

  leasehold store init --store URL   create the table, schema or file ahead of time

The store is named by --store, else by $LEASEHOLD_STORE, else it is the
default SQLite file; "leasehold --help" lists the URL forms. Without a
subcommand store prints this help and exits 64.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SetOut(e.stderr)
			_ = cmd.Help()
			return usagef("store: missing subcommand")
		},
	}
	var store string
	initCmd := &cobra.Command{
		Use:   "init [--store URL]",
		Short: "Create what a store needs (table, schema, file)",
		Long:  storeInitLong,
		Example: `  leasehold store init --store postgres://leasehold@db.internal/app
  leasehold store init --store sqlite:///var/lib/leasehold/leases.db`,
		Args: cobra.NoArgs,
		RunE: wrapRun(func(cmd *cobra.Command, args []string) error {
			// Creating a table can take longer than connecting
			// (DynamoDB's does): only an explicit --connect-timeout or
			// connect_timeout= bounds it; a signal always ends it.
			if _, err := e.connect(cmd.Context(), store, "store init", cmd.Flags().Changed("connect-timeout"), openSignals,
				func(ctx context.Context, url string) (leasehold.Store, error) { return nil, stores.Init(ctx, url) }); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "store initialised")
			return nil
		}),
	}
	initCmd.Flags().StringVar(&store, "store", "", "store URL (default $LEASEHOLD_STORE, else the default SQLite file)")
	cmd.AddCommand(initCmd)
	return cmd
}
