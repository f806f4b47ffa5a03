package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// runOptions are the flags and arguments of "run", validated.
type runOptions struct {
	verb    string // "run" or "elect", for messages
	permits int    // > 0: take one of this many permits (a semaphore)
	elect   bool   // leader election: LEASEHOLD_TERM, --on-lost
	onLost  string // elect: "exit" or "restart"
	store   string
	ttl     time.Duration
	wait    time.Duration
	noWait  bool
	// notAcquired is the exit code when the lease was not acquired
	// (--conflict-exit-code; ExitNotAcquired by default).
	notAcquired int
	owner       string
	grace       time.Duration
	data        string
	name        string
	command     []string
	secret      string // the grant's holder proof (lease server), for CMD's LEASEHOLD_SECRET
}

const runLong = `Run takes the lease NAME, runs CMD with ARGS while holding it, and releases
it when CMD exits. It is a lock around a command: two "leasehold run" with
the same NAME and store never run their commands at the same time (while
each keeps its lease alive).

With --permits N, run takes one of N permits of NAME instead (a
semaphore: at most N commands run at once); each permit is a lease of its
own, named NAME/permit/I, passed to CMD in LEASEHOLD_PERMIT. With the
lease server (--store http://, leasehold://) it waits in the server's queue
of the semaphore, in arrival order, and the server counts it as a waiter.

By default run waits for the lease as long as it takes; -w/--wait bounds
the wait and -n/--no-wait makes one attempt (as flock's -w and -n); when
the lease was not acquired run exits 75, or the code -E/--conflict-exit-code
gives (-E 0: skip quietly). While waiting it shows who holds the lease, since
when and when it expires (with --permits: every holder of the N permits), on
a status line updated in place when stderr is a terminal, else on one line.

CMD runs with stdin, stdout and stderr inherited and these variables added:

  LEASEHOLD_NAME    the lease name
  LEASEHOLD_OWNER   the owner identity the lease was granted to
  LEASEHOLD_TOKEN   the fencing token (decimal): strictly greater than the
                    token of every earlier holder of NAME; pass it to the
                    resources you write so they can reject stale writers
  LEASEHOLD_PERMIT  with --permits only: the permit's own lease name,
                    NAME/permit/I (I from 0 to N-1)
  LEASEHOLD_SECRET  through a lease server: the grant's secret, the proof
                    of holding it that "leasehold release" needs there
                    (set only when the server gives one; keep it private)

With --permits, LEASEHOLD_TOKEN is the token of that permit's lease: each
permit counts its own grants, so the first holders of two permits both get
token 1 (permits are granted independently, with no counter shared
between them). A resource that fences writers of a permit compares tokens
of that LEASEHOLD_PERMIT only: for each permit, every grant's token is
greater than the one before. "leasehold release NAME" in CMD releases the
permit (it reads LEASEHOLD_PERMIT).

CMD runs in a process group of its own, led by a small keeper process
(leasehold started again), and the whole group lives and dies with the
lease:

  - Every signal below goes to the whole group, so a shell script's
    background jobs, make's and npm's children get it too.
  - The lease is renewed in the background every TTL/3. If no renewal has
    been confirmed by GRACE before the lease's local deadline (checked on
    the monotonic and the boot-time clock, so a suspend counts), the group
    gets SIGTERM, and SIGKILL if anything of it still runs at the deadline.
    If the store refuses a renewal (the lease expired or was released by
    someone else), the group gets SIGTERM at once and SIGKILL min(GRACE,
    time left to the deadline) later; if that happens after the SIGTERM for
    the grace window, SIGKILL follows at once. Run then exits 76.
  - When CMD exits, whatever it left running in its group gets SIGTERM, and
    SIGKILL 1s later (sooner at the deadline), before the lease is released.
  - If leasehold itself dies (SIGKILL, a crash, the OOM killer), the keeper
    kills the group at once; if leasehold is stopped or starved so that it
    cannot renew, the keeper kills the group at the lease's local deadline.
    Either way before the lease can be granted again.
  - Every SIGKILL "at the deadline" is sent a kill margin, max(50ms, 5% of
    TTL), before it, so that a kill delayed by a busy machine still lands
    in time. --ttl must be at least 500ms.
  - A force-release (leasehold force-release) frees the lease for others at
    once: the command runs on until the next renewal is refused.

Renewals are sent every TTL/3 and the local deadline is TTL*0.99 - 5ms after
the last one was sent, so GRACE must be below the renewal window
TTL*0.99 - 5ms - TTL/3 (about 0.66*TTL), and should leave time for a
renewal round trip.

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to leasehold are
forwarded to the group (one that was ignored when leasehold started, as
under nohup, stays ignored for CMD too). A signal received while waiting
for the lease ends the wait (exit 128+N).

In a terminal, CMD's group gets the foreground while it runs: it reads the
terminal, Ctrl-C reaches it once, and Ctrl-Z stops it and leasehold with it
(the shell shows the job stopped; fg continues both). A job stopped longer
than the lease's renewal window loses the lease: on fg the group is killed
and run exits 76.

A process that leaves the group on purpose (setsid, a daemon that double-
forks) escapes all this: see docs/wrappers.md for what is guaranteed and how
to close that gap (a systemd unit, a cgroup).

Exit codes:
  (CMD's)  CMD's exit status; 128+N if CMD died from signal N (130: Ctrl-C)
  64       usage error: bad flags or arguments, invalid name, owner,
           TTL, grace or store URL (nothing is written to the store)
  70       store or internal error (also: the keeper could not be started)
  75       lease not acquired: --no-wait found it held, or --wait timed out
           (-E/--conflict-exit-code sets another code)
  76       lease lost (or not renewed in time) while CMD ran; CMD's group
           was stopped
  126, 127 CMD could not be started, or was not found
  128+N    a signal N ended the wait for the lease`

const runExample = `  # Run the nightly backup unless another host is already running it.
  leasehold run --store sqlite:///var/lib/leasehold/leases.db --no-wait \
      backup/nightly -- /usr/local/bin/backup.sh --full

  # Wait up to 10 minutes for the lease; keep it alive with a 30s TTL.
  leasehold run --wait 10m --ttl 30s deploy/prod -- make deploy

  # Use the fencing token in the child.
  leasehold run jobs/report -- sh -c 'generate-report --fence "$LEASEHOLD_TOKEN"'`

func newRunCmd(e *env) *cobra.Command {
	o := &runOptions{verb: "run", notAcquired: ExitNotAcquired}
	cmd := &cobra.Command{
		Use:     "run [flags] NAME -- CMD [ARGS...]",
		Short:   "Run a command while holding a lease",
		Long:    runLong,
		Example: runExample,
		RunE: wrapRun(func(cmd *cobra.Command, args []string) error {
			if err := o.parse(cmd, args); err != nil {
				return err
			}
			return o.run(cmd.Context(), e)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.store, "store", "", "store URL (default $LEASEHOLD_STORE, else the default SQLite file)")
	f.DurationVar(&o.ttl, "ttl", leasehold.DefaultTTL, "lease time to live; renewed every TTL/3 while CMD runs")
	o.waitFlags(cmd)
	f.StringVar(&o.owner, "owner", "", "owner identity (default HOSTNAME/PID/RANDOM)")
	f.DurationVar(&o.grace, "grace", 0, "SIGTERM CMD this long before the lease's deadline if no renewal was confirmed (default TTL/3, or half the renewal window if TTL/3 is not inside it; must be < TTL*0.99 - 5ms - TTL/3)")
	f.StringVar(&o.data, "data", "", "data to attach to the lease (shown by status --json)")
	f.IntVar(&o.permits, "permits", 0, "take one of N permits of NAME instead of NAME itself: at most N commands run at once (a semaphore)")
	return cmd
}

// parse checks the flags and arguments without touching the store.
func (o *runOptions) parse(cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash < 0 && len(args) == 0:
		return usagef("%s: missing NAME and -- CMD", o.verb)
	case dash < 0:
		return usagef("%s: missing -- before the command (leasehold %s NAME -- CMD [ARGS...])", o.verb, o.verb)
	case dash == 0:
		return usagef("%s: missing NAME before --", o.verb)
	case dash > 1:
		return usagef("%s: expected one NAME before --, got %d arguments", o.verb, dash)
	case len(args) == dash:
		return usagef("%s: missing command after --", o.verb)
	}
	o.name, o.command = args[0], args[1:]
	if err := o.check(cmd); err != nil {
		return err
	}
	if _, err := exec.LookPath(o.command[0]); err != nil {
		return startError(o.command[0], err)
	}
	return nil
}

// check validates the flags and o.name without touching the store.
func (o *runOptions) check(cmd *cobra.Command) error {
	if err := storekit.ValidateName(o.name); err != nil {
		return usagef("%s: %v", o.verb, err)
	}
	if err := storekit.ValidateTTL(o.ttl); err != nil {
		return usagef("%s: --ttl: %v", o.verb, err)
	}
	if o.command != nil && o.ttl < minCommandTTL {
		return usagef("%s: --ttl %s is below the minimum of %s for a command: it needs time to start, and its process group is killed max(50ms, 5%% of TTL) before the lease's deadline", o.verb, o.ttl, minCommandTTL)
	}
	if o.wait < 0 {
		return usagef("%s: --wait %s must not be negative", o.verb, o.wait)
	}
	if o.noWait && cmd.Flags().Changed("wait") {
		return usagef("%s: --wait and --no-wait exclude each other", o.verb)
	}
	if o.notAcquired < 0 || o.notAcquired > 255 {
		return usagef("%s: --conflict-exit-code %d must be in [0, 255]", o.verb, o.notAcquired)
	}
	if cmd.Flags().Changed("owner") {
		if err := storekit.ValidateOwner(o.owner); err != nil {
			return usagef("%s: --owner: %v", o.verb, err)
		}
	}
	if !cmd.Flags().Changed("grace") {
		o.grace = defaultGrace(o.ttl)
	}
	if w := leasehold.RenewalWindow(o.ttl); o.grace <= 0 || o.grace >= w {
		return usagef("%s: --grace %s must be more than 0 and less than the renewal window TTL*0.99 - 5ms - TTL/3 (%s)", o.verb, o.grace, w)
	}
	if cmd.Flags().Changed("permits") && (o.permits < 1 || o.permits > leasehold.MaxPermits) {
		return usagef("%s: --permits %d must be in [1, %d]", o.verb, o.permits, leasehold.MaxPermits)
	}
	if err := storekit.ValidateData([]byte(o.data)); err != nil {
		return usagef("%s: --data: %v", o.verb, err)
	}
	return nil
}

// waitFlags adds the flags that say how long to wait for the lease and
// what to exit with when it was not acquired (run and hold).
func (o *runOptions) waitFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.DurationVarP(&o.wait, "wait", "w", 0, "longest time to wait for the lease (0: wait forever)")
	f.BoolVarP(&o.noWait, "no-wait", "n", false, "try once; exit at once (75, or -E's code) if the lease is held")
	f.IntVarP(&o.notAcquired, "conflict-exit-code", "E", ExitNotAcquired, "exit code when the lease was not acquired (--no-wait found it held, --wait timed out)")
}

// defaultGrace is --grace when it is not given: TTL/3 where that is inside
// the renewal window (TTLs above about 16ms), else half the window (short
// TTLs, down to the 10ms minimum).
func defaultGrace(ttl time.Duration) time.Duration {
	if w := leasehold.RenewalWindow(ttl); ttl/3 >= w {
		return w / 2
	}
	return ttl / 3
}

// startError maps a failure to find or start the command to 127 or 126.
func startError(name string, err error) error {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitf(ExitNotFound, "run: command %q not found", name)
	}
	return exitf(ExitCannotExec, "run: cannot run %q: %v", name, err)
}

// open opens the store and a client of it (with --owner, if given); verb
// names the command in a refusal.
func (o *runOptions) open(ctx context.Context, e *env, verb string) (leasehold.Store, *leasehold.Client, error) {
	store, err := e.openStore(ctx, o.store)
	if err != nil {
		return nil, nil, err
	}
	var opts []leasehold.Option
	if o.owner != "" {
		opts = append(opts, leasehold.WithOwner(o.owner))
	}
	client, err := leasehold.New(store, opts...)
	if err != nil {
		store.Close()
		return nil, nil, classify(err, "%s", verb)
	}
	return store, client, nil
}

// run acquires the lease, supervises the command and releases the lease
// (for elect with --on-lost restart, again after each loss).
func (o *runOptions) run(ctx context.Context, e *env) error {
	// Catch the forwarded signals from now on: while waiting they end the
	// wait, while the command runs they are forwarded to it, and while the
	// lease is released they do not cut the release short.
	sigs := make(chan os.Signal, 8)
	if caught := catchSignals(); len(caught) > 0 {
		signal.Notify(sigs, caught...)
		defer signal.Stop(sigs)
	}

	store, client, err := o.open(ctx, e, o.verb)
	if err != nil {
		return err
	}
	defer store.Close()
	for {
		lease, err := o.acquire(ctx, e, client, sigs)
		if err != nil {
			return err
		}
		if o.elect {
			fmt.Fprintf(e.stderr, "leasehold: leader of %s in term %d\n", o.name, lease.Token())
		}
		o.secret = grantSecret(store, lease)
		err = o.supervise(ctx, e, lease, sigs)
		// elect --on-lost restart: back to standby after losing leadership.
		var ee *exitError
		if !o.elect || o.onLost != "restart" || !errors.As(err, &ee) || ee.code != ExitLost || ctx.Err() != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "leasehold: %s; campaigning again\n", ee.msg)
	}
}

// acquire takes the lease as the flags say. A signal from sigs ends the
// wait.
func (o *runOptions) acquire(ctx context.Context, e *env, client *leasehold.Client, sigs <-chan os.Signal) (*leasehold.Lease, error) {
	aopts := []leasehold.AcquireOption{leasehold.TTL(o.ttl)}
	if o.data != "" {
		aopts = append(aopts, leasehold.Data([]byte(o.data)))
	}
	var holders func(context.Context) ([]leasehold.Record, error)
	try := func(ctx context.Context, opts ...leasehold.AcquireOption) (*leasehold.Lease, error) {
		return client.TryAcquire(ctx, o.name, opts...)
	}
	wait := func(ctx context.Context, opts ...leasehold.AcquireOption) (*leasehold.Lease, error) {
		return client.Acquire(ctx, o.name, opts...)
	}
	if o.permits > 0 {
		sem, err := client.Semaphore(o.name, o.permits)
		if err != nil {
			return nil, classify(err, "%s --permits", o.verb)
		}
		try, wait, holders = sem.TryAcquire, sem.Acquire, sem.Holders
	}
	// One attempt first, also when waiting: Acquire retries every store
	// error but invalid arguments for as long as it waits, so a store
	// that fails outright is reported here instead of waited on silently.
	l, err := try(ctx, aopts...)
	var held *leasehold.HeldError
	switch {
	case err == nil:
		return l, nil
	case !errors.As(err, &held):
		return nil, classify(err, "acquire %s", o.name)
	case o.noWait && holders != nil:
		if recs, herr := holders(ctx); herr == nil {
			ws := &waitStatus{name: o.name, permits: o.permits}
			ws.recs = recs
			ws.keepPermits()
			if len(ws.recs) > 0 {
				return nil, exitf(o.notAcquired, "%s: all %d permits are held (%s)", o.name, o.permits, permitHolders(ws.recs))
			}
		}
		fallthrough
	case o.noWait:
		return nil, exitf(o.notAcquired, "%s is held by %s (token %d, expires in %s)",
			o.name, held.Owner, held.Token, roundDuration(held.Remaining))
	}

	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if o.wait > 0 {
		var stop context.CancelFunc
		wctx, stop = context.WithTimeoutCause(wctx, o.wait, errWaitTimeout)
		defer stop()
	}
	ws := newPermitWaitStatus(e.stderr, o.name, o.permits, holders)
	defer ws.stop()
	ws.update(held)
	aopts = append(aopts, leasehold.OnWait(ws.update))

	// A signal ends the wait. The goroutine hands the signal back so that
	// it is not lost if the lease was granted at the same moment.
	stopSigs, caught := make(chan struct{}), make(chan os.Signal, 1)
	go func() {
		defer close(caught)
		select {
		case sig := <-sigs:
			caught <- sig
			cancel(&signalError{sig})
		case <-stopSigs:
		}
	}()

	l, err = wait(wctx, aopts...)
	close(stopSigs)
	ws.stop()
	if sig, ok := <-caught; ok {
		if err == nil {
			if rerr := releaseLease(l); rerr != nil {
				fmt.Fprintf(e.stderr, "leasehold: %v\n", rerr)
			}
		}
		return nil, exitf(signalExitCode(sig), "%s while waiting for %s", sig, o.name)
	}
	if err == nil {
		return l, nil
	}
	cause := context.Cause(wctx)
	switch {
	case ctx.Err() != nil:
		return nil, exitf(ExitInternal, "%s: cancelled while waiting for %s", o.verb, o.name)
	case errors.Is(cause, errWaitTimeout):
		if held := ws.last(); held != nil {
			return nil, exitf(o.notAcquired, "gave up waiting for %s after %s: held by %s (token %d)",
				o.name, o.wait, held.Owner, held.Token)
		}
		return nil, exitf(o.notAcquired, "gave up waiting for %s after %s", o.name, o.wait)
	}
	return nil, classify(err, "acquire %s", o.name)
}

var errWaitTimeout = errors.New("--wait timed out")

// signalError is the cause of a wait ended by a signal.
type signalError struct{ sig os.Signal }

func (s *signalError) Error() string { return fmt.Sprintf("received %s", s.sig) }

// roundDuration rounds d for display: to 100ms under a minute, else to
// seconds.
func roundDuration(d time.Duration) time.Duration {
	if d < time.Minute {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}
