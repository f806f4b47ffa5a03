package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
)

const holdLong = `Hold takes the lease NAME and keeps it (renewing it every TTL/3) until
leasehold gets SIGINT (Ctrl-C), SIGTERM or SIGHUP, then releases it and
exits 0: closing the terminal or the ssh session that runs hold (SIGHUP)
frees the lease at once rather than leaving it held for its TTL. A signal
ignored when hold starts stays ignored: under nohup, hold keeps the lease
when the terminal closes.
It is "leasehold run" without a command, for a shell: hold a lease in one
terminal while you work in another, or hold it in the background of a
script that ends it with "kill PID" (SIGTERM: hold releases the lease and
exits 0; see the examples).

A release from another process ("leasehold release" with hold's owner and
token, or "leasehold force-release") frees the lease too, but hold learns
of it only at its next renewal, which the store refuses: hold then says
"lost" and exits 76, as for any loss. The store does not tell a lease
released from outside from one that expired and was freed, and hold does
not guess.

Once the lease is held, hold prints one line to stdout with the lease's
name, owner, fencing token and deadline (the deadline moves on with every
renewal); with --json it prints one JSON object instead:

  {"name":"deploy/prod","lease":"deploy/prod","owner":"host/123/abc",
   "token":7,"ttl_ms":30000,"deadline":"2026-12-01T16:00:30.5Z"}

("lease" is the permit's own lease, NAME/permit/I, with --permits.)
Through a lease server the object also has "secret": the grant's holder
proof, which "leasehold release --secret" needs to release it from
another process when the server has auth on. Keep it private.

Waiting works as for "run": by default hold waits as long as it takes,
-w/--wait SECONDS bounds the wait (1.5, 1e1, or a duration such as 90s),
-n/--no-wait or -w 0 makes one attempt, quietly unless --verbose (-n
wins over -w; --nonblock, --nb and --timeout are flock's names of -n and
-w). Off a terminal the line naming the holder while it waits is written
only with --verbose; a store that stops answering, and a wait that runs
out, are always said. The wait counts from opening the store (a wait
under 500ms gives opening and the first attempt 500ms); a store that does
not answer within it (also while opening; one that refuses connections
or fails otherwise is tried again until it runs out, and without --wait
one that cannot be reached as long as it takes), or Redis replicas that do not acknowledge the
grant within it, end it with 75; it returns at most 2s after its end
whatever the store does (see "leasehold run --help"). --ttl takes seconds
(30, 1.5) or a duration (30s).

Exit codes:
  0        released after SIGINT, SIGTERM or SIGHUP
  64       usage error (nothing is written to the store)
  70       store or internal error
  75       lease not acquired: --no-wait (or --wait 0) found it held, or
           --wait timed out, also with the store not answering or Redis
           replicas not acknowledging the grant within it
           (-E/--conflict-exit-code sets another code)
  76       lease lost: a renewal was refused (also after a release from
           another process) or not confirmed in time
  78       NAME is in use otherwise: a semaphore with another --permits
           count, or a semaphore and a plain lease (nothing is held)
  128+N    a signal N (SIGINT, SIGTERM, SIGHUP) ended the opening of
           the store or the wait for the lease`

const holdExample = `  # Hold deploy/prod until Ctrl-C.
  leasehold hold deploy/prod

  # From a script: hold in the background, read the grant, then end the
  # hold with SIGTERM: it releases the lease and exits 0.
  leasehold hold --json --owner "$(hostname)/deploy" deploy/prod > grant.json &
  hold=$!
  until [ -s grant.json ]; do kill -0 "$hold" || exit 1; sleep 0.1; done   # held
  ...
  kill "$hold"; wait "$hold"

  # Releasing from another process frees the lease as well, but the hold,
  # if it still runs, then exits 76 ("lost") at its next renewal.
  leasehold release deploy/prod --owner "$(hostname)/deploy" --token "$(jq .token grant.json)" \
      --secret "$(jq -r '.secret // ""' grant.json)"`

// holdJSON is what "hold --json" prints once the lease is held.
type holdJSON struct {
	Name     string `json:"name"`
	Lease    string `json:"lease"`
	Owner    string `json:"owner"`
	Token    uint64 `json:"token"`
	TTLMS    int64  `json:"ttl_ms"`
	Deadline string `json:"deadline"`
	Secret   string `json:"secret,omitempty"` // the grant's holder proof (lease server)
}

func newHoldCmd(e *env) *cobra.Command {
	o := &runOptions{verb: "hold", notAcquired: ExitNotAcquired}
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "hold [flags] NAME",
		Short:   "Hold a lease until interrupted (Ctrl-C), keeping it alive",
		Long:    holdLong,
		Example: holdExample,
		Args:    cobra.ExactArgs(1),
		RunE: wrapRun(func(cmd *cobra.Command, args []string) error {
			o.name = args[0]
			if err := o.check(cmd); err != nil {
				return err
			}
			return o.hold(cmd.Context(), e, asJSON)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.store, "store", "", "store URL (default $LEASEHOLD_STORE, else the default SQLite file)")
	durationFlag(f, &o.ttl, "ttl", leasehold.DefaultTTL, "lease time to live; renewed every TTL/3")
	o.waitFlags(cmd)
	f.StringVar(&o.owner, "owner", "", "owner identity (default HOSTNAME/PID/RANDOM)")
	f.StringVar(&o.data, "data", "", "data to attach to the lease (shown by status --json)")
	f.IntVar(&o.permits, "permits", 0, "take one of N permits of NAME instead of NAME itself (a semaphore)")
	f.BoolVar(&asJSON, "json", false, "print the grant as one JSON object (once held)")
	return cmd
}

// releasedBy says which signal releases a hold: Ctrl-C (SIGINT), unless
// SIGINT is ignored, as for a background job of a script.
func releasedBy() string {
	switch {
	case !signal.Ignored(os.Interrupt):
		return "Ctrl-C releases it"
	case !signal.Ignored(syscall.SIGTERM):
		return "SIGTERM releases it (kill PID; SIGINT is ignored here, as in a script's background job)"
	}
	return "SIGINT and SIGTERM are ignored here: leasehold release frees it"
}

// hold acquires the lease, reports it and keeps it until SIGINT, SIGTERM
// or SIGHUP (released, nil) or until it is lost (exit 76).
func (o *runOptions) hold(ctx context.Context, e *env, asJSON bool) error {
	// A signal ignored when hold started (SIGINT for a background job of
	// a script, SIGHUP under nohup) stays ignored.
	sigs := make(chan os.Signal, 3)
	var caught []os.Signal
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP} {
		if !signal.Ignored(sig) {
			signal.Notify(sigs, sig)
			caught = append(caught, sig)
		}
	}
	defer signal.Stop(sigs)

	store, client, err := o.open(ctx, e, "hold", caught, sigs)
	if err != nil {
		return err
	}
	defer func() { closeStore(store, o.hurry) }()
	lease, err := o.acquire(ctx, e, client, sigs)
	if err != nil {
		return err
	}
	deadline := lease.Deadline()
	if asJSON {
		b, _ := json.Marshal(holdJSON{
			Name: o.name, Lease: lease.Name(), Owner: lease.Owner(), Token: lease.Token(),
			TTLMS: lease.TTL().Milliseconds(), Deadline: deadline.UTC().Format(time.RFC3339Nano),
			Secret: grantSecret(store, lease),
		})
		fmt.Fprintf(e.stdout, "%s\n", b)
	} else {
		what := visible(o.name)
		if lease.Name() != o.name {
			what = fmt.Sprintf("%s (permit %s)", visible(o.name), visible(lease.Name()))
		}
		fmt.Fprintf(e.stdout, "holding %s as %s, token %d; deadline %s, renewed every %s; %s\n",
			what, visible(lease.Owner()), lease.Token(), deadline.Local().Format("15:04:05.000"), shortDuration(lease.TTL()/3), releasedBy())
	}

	select {
	case sig := <-sigs:
		if err := releaseLease(lease); err != nil {
			if errors.Is(err, leasehold.ErrLost) {
				return exitf(ExitLost, "hold: %s lost before the release: %v", visible(o.name), err)
			}
			return exitf(ExitInternal, "hold: %v", err)
		}
		fmt.Fprintf(e.stderr, "leasehold: %s: released %s (token %d)\n", sig, visible(lease.Name()), lease.Token())
		return nil
	case <-lease.Done():
		releaseLost(lease)
		return exitf(ExitLost, "hold: lost %s (token %d): %v", visible(lease.Name()), lease.Token(), lease.Err())
	case <-ctx.Done():
		_ = releaseLease(lease)
		return exitf(ExitInternal, "hold: cancelled")
	}
}
