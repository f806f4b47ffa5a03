package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
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
	wait    time.Duration // with --wait given as 0, noWait is set instead
	noWait  bool
	verbose bool // --verbose: say why when --no-wait found the lease held, and that it waits
	// quietWait (run, hold): off a terminal, the line saying who holds
	// the lease while the command waits is written only with --verbose.
	quietWait bool
	// notAcquired is the exit code when the lease was not acquired
	// (--conflict-exit-code; ExitNotAcquired by default).
	notAcquired int
	owner       string
	grace       time.Duration
	data        string
	name        string
	command     []string
	secret      string // the grant's holder proof (lease server), for CMD's LEASEHOLD_SECRET
	// hurry: the wait ran out or a signal ended it, so the store's close
	// is bounded (closeStore).
	hurry bool
	// waitFrom: when a bounded wait began (openContext), until acquire
	// takes it over.
	waitFrom time.Time
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
N is recorded with each permit (the first line of its data): run with
another N while permits are held is refused (exit 78), and so are a
semaphore and a plain lease of the same NAME; to change N, wait until no
permit is held. A NAME of more than 247 bytes leaves no room for the
permit suffix: it can only be a plain lease.

By default run waits for the lease as long as it takes. The flags mean
what flock(1)'s do: -w/--wait SECONDS bounds the wait (2, 1.5, 1e1, 0x10,
as strtod(3) reads them for flock; Go durations such as 90s or 10m work
too), -w 0 and -n/--no-wait make one attempt (-n with -w, in either
order, too: -n wins, as in flock), and when the lease was not acquired
run exits 75, or the code -E/--conflict-exit-code gives (-E 0: skip).
flock's long names work too: --nonblock and --nb for -n, --timeout for
-w. -n (and -w 0) is quiet: it writes nothing to stderr when the lease is
held, so that a cron job that skips mails nothing; --verbose says who
holds it. While waiting it shows who holds the lease, since when and when
it expires (with --permits: every holder of the N permits) on a status
line updated in place when stderr is a terminal; elsewhere it is as
silent as flock -w (a cron job that had to wait mails nothing), and
--verbose writes that line once. Failures are written anyway: a store
that stops answering during the wait (once: "the store does not answer
(since T: ERR); still trying", and that it answers again), a wait that
runs out, a lost lease. Unlike flock, the default exit code when not
acquired is 75, not 1. The first attempt (with -n, the only one) gives up
after --connect-timeout (or the URL's connect_timeout=) without an answer
from the store: exit 70. Every duration flag (--wait, --ttl, --grace,
--connect-timeout) takes seconds (30, 1.5) or a duration (30s, 500ms).

A wait of D counts from opening the store, which it bounds too, as it
bounds the first attempt: a store that has not answered when D runs out
(a stopped server, a PostgreSQL primary waiting for a synchronous standby
that is down) ends it with exit 75, saying so, whatever --connect-timeout
is. A store that cannot be opened (it refuses connections, a lease
server too, or gives up after --connect-timeout, or fails otherwise with
exit 70) is tried again, after 100ms doubling to 2s, saying so once on
stderr: with --wait D until D runs out, then exit 75 naming the last
error; without --wait, one that cannot be reached (refused, no route,
no answer within --connect-timeout) as long as it takes, as a store that
fails during the wait is, while other failures (a wrong password) exit
70 (a bad store URL: 64 at once; -n, -w 0: 70 at once). A
lease server that does not answer a waiter's long-poll 5s after the
wait it asked for (a stopped or hung server) is said not to answer too.
A wait shorter than 500ms still gives opening the store and the first
attempt 500ms, so that -w 1ns tries once, as -n does. --wait D returns at
most 2s after D whatever the store does, and a signal ends a wait within
2s (128+N): a store call still running then (a stopped or hung server) is
left behind, and a grant it may still make is given back or expires
after its TTL. A grant that fewer Redis replicas acknowledged
than wait_replicas= asks for (the store gives it back) is tried again
while the wait lasts, as a busy lease is; if the wait runs out so, exit
75 names how many replicas acknowledged (-n: exit 70).

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
                    when the server has auth on (set only when the
                    server gives one; keep it private)
  LEASEHOLD_CONTROL the path of run's control socket (in a directory only
                    its user can enter, in TMPDIR, or in /tmp when TMPDIR
                    is too long for a socket's path, missing or not
                    writable; without either, run warns and sets none):
                    "leasehold release" in CMD releases CMD's own lease
                    through it, and run then stops supervising and exits
                    with CMD's status. Killed with SIGKILL, run leaves
                    that directory behind

A command that clears its environment before calling "leasehold release"
(env -i, env -u LEASEHOLD_CONTROL, sudo, ssh to another host) and gives
--owner and --token itself releases in the store behind run's back: run
finds the lease lost at its next renewal, stops CMD and exits 76. To
release early and go on, keep the LEASEHOLD_ variables, LEASEHOLD_CONTROL
among them, for the release (on the same host).

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
  - CMD may release the lease early with "leasehold release
    $LEASEHOLD_NAME": run releases it and stops supervising (no SIGTERM,
    no kill at the deadline), CMD goes on without the lease, and run exits
    with CMD's status when it ends (its leftover processes are still
    stopped then).

Renewals are sent every TTL/3 and the local deadline is TTL*0.99 - 5ms after
the last one was sent, so GRACE must be below the renewal window
TTL*0.99 - 5ms - TTL/3 (about 0.66*TTL), and should leave time for a
renewal round trip.

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to leasehold are
forwarded to the group (one that was ignored when leasehold started, as
under nohup, stays ignored for CMD too). A signal received while opening
the store or waiting for the lease ends it (exit 128+N).

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
  75       lease not acquired: --no-wait (or --wait 0) found it held, or
           --wait timed out, also with the store not answering or Redis
           replicas not acknowledging the grant within it
           (-E/--conflict-exit-code sets another code)
  76       lease lost (or not renewed in time) while CMD ran; CMD's group
           was stopped
  78       NAME is in use otherwise: a semaphore with another --permits
           count, or a semaphore and a plain lease (nothing is held)
  126, 127 CMD could not be started, or was not found
  128+N    a signal N ended the opening of the store or the wait for
           the lease`

const runExample = `  # Run the nightly backup unless another host is already running it.
  leasehold run --store sqlite:///var/lib/leasehold/leases.db --no-wait \
      backup/nightly -- /usr/local/bin/backup.sh --full

  # Wait up to 10 minutes for the lease; keep it alive with a 30s TTL.
  leasehold run --wait 10m --ttl 30s deploy/prod -- make deploy

  # Use the fencing token in the child.
  leasehold run jobs/report -- sh -c 'generate-report --fence "$LEASEHOLD_TOKEN"'

  # A NAME that starts with "-" goes between two --.
  leasehold run -- -nightly -- backup.sh`

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
	durationFlag(f, &o.ttl, "ttl", leasehold.DefaultTTL, "lease time to live; renewed every TTL/3 while CMD runs")
	o.waitFlags(cmd)
	f.StringVar(&o.owner, "owner", "", "owner identity (default HOSTNAME/PID/RANDOM)")
	durationFlag(f, &o.grace, "grace", 0, "SIGTERM CMD this long before the lease's deadline if no renewal was confirmed (default TTL/3, or half the renewal window if TTL/3 is not inside it; must be < TTL*0.99 - 5ms - TTL/3)")
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
	case dash == 0 && slices.Index(args, "--") == 1:
		// leasehold run [flags] -- NAME -- CMD: a NAME that starts
		// with "-" goes after a first "--".
		args = slices.Delete(slices.Clone(args), 1, 2)
		dash = 1
		if len(args) == dash {
			return usagef("%s: missing command after --", o.verb)
		}
	case dash == 0 && slices.Contains(args, "--"):
		return usagef("%s: expected one NAME between the two --, got %d arguments", o.verb, slices.Index(args, "--"))
	case dash == 0:
		return usagef("%s: missing NAME before -- (a NAME that starts with - goes between two --: leasehold %s -- -NAME -- CMD)", o.verb, o.verb)
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
	// -n with -w (in either order) is one attempt, as flock(1) does not
	// block with -n whatever -w says (it refused with 64: issue 29's red
	// team, #9).
	if o.wait == 0 && cmd.Flags().Changed("wait") {
		o.noWait = true // flock's -w 0: fail at once when held
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
		return usagef("%s: --grace %s must be more than 0 and less than the renewal window TTL*0.99 - 5ms - TTL/3 (%s)", o.verb, o.grace, shortDuration(w))
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
	f.VarP((*waitValue)(&o.wait), "wait", "w", "longest time to wait for the lease: seconds as flock takes them (2, 1.5, 1e1, 0x10) or a duration (90s, 10m); 0 does not wait, as --no-wait; also --timeout, as flock (default: wait as long as it takes)")
	f.BoolVarP(&o.noWait, "no-wait", "n", false, "try once; exit at once (75, or -E's code), quietly, if the lease is held; with -w too, -n wins, as in flock; also --nonblock and --nb, as flock")
	f.IntVarP(&o.notAcquired, "conflict-exit-code", "E", ExitNotAcquired, "exit code when the lease was not acquired (--no-wait found it held, --wait timed out)")
	f.BoolVar(&o.verbose, "verbose", false, "say who holds the lease when --no-wait (or --wait 0) did not get it, and, when stderr is not a terminal, that the command waits for it (a terminal always shows the wait)")
	f.SetNormalizeFunc(flockNames)
	o.quietWait = true
}

// flockNames maps flock(1)'s long names of the wait flags to leasehold's:
// --nonblock and --nb are --no-wait, --timeout is --wait (they were
// unknown flags: issue 29's red team, #9).
func flockNames(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	switch name {
	case "nonblock", "nb":
		name = "no-wait"
	case "timeout":
		name = "wait"
	}
	return pflag.NormalizedName(name)
}

// waitValue is -w/--wait: a number of seconds as flock(1) takes them ("2",
// "1.5", "0") or a Go duration ("2s", "500ms", "10m").
type waitValue time.Duration

// String is empty for the default (no --wait: wait as long as it takes),
// so that help shows no misleading "(default 0s)".
func (w *waitValue) String() string {
	if *w == 0 {
		return ""
	}
	return time.Duration(*w).String()
}

func (w *waitValue) Type() string { return "seconds" }

func (w *waitValue) Set(s string) error {
	d, err := parseWait(s)
	if err != nil {
		return err
	}
	*w = waitValue(d)
	return nil
}

// parseWait reads --wait (parseSeconds).
func parseWait(s string) (time.Duration, error) { return parseSeconds(s) }

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
// names the command in a refusal. The signals watch, whose copies arrive
// on sigs, end it (openWaiting).
func (o *runOptions) open(ctx context.Context, e *env, verb string, watch []os.Signal, sigs <-chan os.Signal) (leasehold.Store, *leasehold.Client, error) {
	store, err := o.openWaiting(ctx, e, watch, sigs)
	if err != nil {
		return nil, nil, err
	}
	var opts []leasehold.Option
	if o.owner != "" {
		opts = append(opts, leasehold.WithOwner(o.owner))
	}
	if e.clock != nil {
		opts = append(opts, leasehold.WithClock(e.clock))
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
	caught := catchSignals()
	if len(caught) > 0 {
		signal.Notify(sigs, caught...)
		defer signal.Stop(sigs)
	}

	store, client, err := o.open(ctx, e, o.verb, caught, sigs)
	if err != nil {
		return err
	}
	defer func() { closeStore(store, o.hurry) }()
	for {
		lease, err := o.acquire(ctx, e, client, sigs)
		if err != nil {
			return err
		}
		if o.elect {
			fmt.Fprintf(e.stderr, "leasehold: leader of %s in term %d\n", visible(o.name), lease.Token())
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
	// A signal ends the attempt and the wait (actx's cause is then a
	// *signalError). The goroutine stops before the lease is returned, so
	// that supervise gets the signals that come after.
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopSigs, sigsDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sigsDone)
		select {
		case sig := <-sigs:
			cancel(&signalError{sig})
		case <-stopSigs:
		}
	}()
	stopped := false
	// interrupted stops watching for signals and returns the one that
	// ended the attempt or the wait, if any.
	interrupted := func() os.Signal {
		if !stopped {
			stopped = true
			close(stopSigs)
			<-sigsDone
		}
		var se *signalError
		if errors.As(context.Cause(actx), &se) {
			return se.sig
		}
		return nil
	}
	defer interrupted()
	// byInterrupt ends the command for a signal received while taking the
	// lease; a lease granted at that moment is released.
	byInterrupt := func(sig os.Signal, l *leasehold.Lease, err error) error {
		if l != nil && err == nil {
			if rerr := releaseLease(l); rerr != nil {
				fmt.Fprintf(e.stderr, "leasehold: %v\n", rerr)
			}
		}
		o.hurry = true
		return exitf(signalExitCode(sig), "%s while waiting for %s", sig, visible(o.name))
	}

	// The wait counts from opening the store (openContext), the first
	// attempt included, which gets at least minFirstTry.
	wctx, fctx, stop := o.waitContexts(actx)
	defer stop()

	// One attempt first, also when waiting: Acquire retries every store
	// error but invalid arguments for as long as it waits, so a store
	// that fails outright is reported here instead of waited on silently.
	// The attempt is bounded (attemptTimeout, and the wait): a store that
	// takes it and never answers (a PostgreSQL primary waiting for a
	// synchronous standby that is gone) is reported too. A grant that
	// fewer replicas than asked acknowledged (Redis wait_replicas=, the
	// store gave it back) is tried again while the wait lasts, as a busy
	// lease is.
	bound, source := e.attemptTimeout(o.store)
	tctx, tcancel := context.WithTimeoutCause(fctx, bound, errAttemptTimeout)
	l, err := stuckBound(tctx, fctx, func(ctx context.Context) (*leasehold.Lease, error) { return try(ctx, aopts...) })
	timedOut := err != nil && errors.Is(context.Cause(tctx), errAttemptTimeout)
	waitOut := err != nil && errors.Is(context.Cause(tctx), errWaitTimeout)
	tcancel()
	var held *leasehold.HeldError
	isHeld := err != nil && errors.As(err, &held)
	waitOut = waitOut && !isHeld // a refusal that came as the wait ended is one
	var ue *redis.UnreplicatedError
	unreplicated := err != nil && !waitOut && errors.As(err, &ue)
	waits := (isHeld || unreplicated) && !o.noWait
	if !waits {
		if sig := interrupted(); sig != nil {
			return nil, byInterrupt(sig, l, err)
		}
	} else if errors.As(context.Cause(actx), new(*signalError)) {
		return nil, byInterrupt(interrupted(), nil, err)
	}
	switch {
	case err == nil:
		return o.notSemaphore(ctx, client, l)
	case waitOut && ctx.Err() == nil:
		o.hurry = true
		return nil, exitf(o.notAcquired, "gave up waiting for %s after %s: the store did not answer within the wait%s; the lease may have been granted and is given back or expires after its TTL",
			visible(o.name), shortDuration(o.wait), slowStoreHint(o.store))
	case timedOut && ctx.Err() == nil:
		return nil, exitf(ExitInternal, "acquire %s: no answer from the store within %s (raise %s if it is only slow)%s; the lease may have been granted and is given back or expires after its TTL",
			visible(o.name), bound, source, slowStoreHint(o.store))
	case waits:
	case !isHeld:
		return nil, classify(err, "acquire %s", visible(o.name))
	case o.noWait && !o.verbose:
		// As flock -n: quiet, so that a skipped cron job mails nothing.
		return nil, &exitError{code: o.notAcquired}
	case o.noWait && holders != nil:
		if recs, herr := holders(ctx); herr == nil {
			ws := &waitStatus{name: o.name, permits: o.permits}
			ws.recs = recs
			ws.keepPermits()
			if len(ws.recs) > 0 {
				return nil, exitf(o.notAcquired, "%s: all %d permits are held (%s)", visible(o.name), o.permits, permitHolders(ws.recs))
			}
		}
		fallthrough
	case o.noWait:
		return nil, exitf(o.notAcquired, "%s", heldMessage(o.name, held))
	}

	ws := newPermitWaitStatus(e.stderr, o.name, o.permits, holders, o.quietWait && !o.verbose)
	defer ws.stop()
	if isHeld {
		ws.update(held)
	} else {
		ws.failed(err)
	}
	firstErr := err
	aopts = append(aopts, leasehold.OnWait(ws.update), leasehold.OnError(ws.failed))
	stopPolls := ws.watchPolls(client.Store())

	l, err = stuckBound(wctx, wctx, func(ctx context.Context) (*leasehold.Lease, error) { return wait(ctx, aopts...) })
	stopPolls()
	if err == nil {
		ws.answered() // before "got it": issue 29's red team, #4
	}
	ws.stop()
	if sig := interrupted(); sig != nil {
		return nil, byInterrupt(sig, l, err)
	}
	if err == nil {
		return o.notSemaphore(ctx, client, l)
	}
	cause := context.Cause(wctx)
	o.hurry = errors.Is(cause, errWaitTimeout)
	switch {
	case ctx.Err() != nil:
		return nil, exitf(ExitInternal, "%s: cancelled while waiting for %s", o.verb, visible(o.name))
	case !errors.Is(cause, errWaitTimeout):
		return nil, classify(err, "acquire %s", visible(o.name))
	case errors.Is(err, errStoreStuck):
		return nil, exitf(o.notAcquired, "gave up waiting for %s after %s: the store did not answer at the end of the wait%s",
			visible(o.name), shortDuration(o.wait), slowStoreHint(o.store))
	}
	last := ws.lastErr()
	if h, _ := ws.lastSeen(); last == nil && h == nil {
		last = firstErr
	}
	if last != nil && errors.As(last, &ue) {
		return nil, exitf(o.notAcquired, "gave up waiting for %s after %s: fewer replicas than asked acknowledged the grant in time, so the store gave it back (last attempt: %s)",
			visible(o.name), shortDuration(o.wait), ue)
	}
	if held := o.lastHolder(client, ws); held != nil && holdback(held, held.Remaining) != "" {
		return nil, exitf(o.notAcquired, "gave up waiting for %s after %s: %s", visible(o.name), shortDuration(o.wait), holdback(held, held.Remaining))
	} else if held != nil {
		return nil, exitf(o.notAcquired, "gave up waiting for %s after %s: held by %s (token %d)",
			visible(o.name), shortDuration(o.wait), visible(held.Owner), held.Token)
	}
	return nil, exitf(o.notAcquired, "gave up waiting for %s after %s", visible(o.name), shortDuration(o.wait))
}

var (
	errWaitTimeout    = errors.New("--wait timed out")
	errAttemptTimeout = errors.New("the attempt timed out")
)

// notSemaphore checks, once the plain lease l is granted (no --permits),
// that NAME is not a semaphore with live permits; if it is, l is released
// and the error is a mismatch (exit 78). Semaphore makes the same check
// from the other side, also after its grant, so that of a lock and a
// permit taken at once at least one is refused. A name too long for a
// permit suffix is not checked.
func (o *runOptions) notSemaphore(ctx context.Context, client *leasehold.Client, l *leasehold.Lease) (*leasehold.Lease, error) {
	if o.permits > 0 {
		return l, nil
	}
	// A name too long to carry a permit suffix (NAME/permit/0 is longer
	// than MaxNameLen) cannot have permits, and its prefix NAME/permit/
	// may itself be too long to list: nothing to check.
	if _, err := client.Semaphore(o.name, 1); err != nil {
		return l, nil
	}
	recs, err := client.Store().List(ctx, o.name+"/permit/")
	if err == nil {
		for _, r := range recs {
			if _, ok := leasehold.PermitIndex(o.name, r.Name); ok {
				err = &leasehold.MismatchError{Name: o.name, Reason: fmt.Sprintf(
					"a semaphore whose permit %s is held by %s (token %d), so it cannot be a plain lease (a lock) too; use --permits N, or another name", visible(r.Name), visible(r.Owner), r.Token)}
				break
			}
		}
	}
	if err == nil {
		return l, nil
	}
	_ = releaseLease(l)
	return nil, classify(err, "%s", o.verb)
}

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
