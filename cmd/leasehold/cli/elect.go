package cli

import (
	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
)

const electLong = `Elect runs CMD only while this instance is the leader of the election
NAME: active/passive pairs. Start it on every node; one becomes leader and
runs CMD, the others wait as standbys. When the leader resigns (CMD exits,
or leasehold gets SIGTERM) a standby takes over at once; when the leader
dies, a standby takes over once its lease expires (within --ttl).

CMD gets LEASEHOLD_NAME, LEASEHOLD_OWNER, LEASEHOLD_TOKEN and LEASEHOLD_TERM
(the term: the leader's fencing token, strictly increasing per election),
through a lease server LEASEHOLD_SECRET, and LEASEHOLD_CONTROL, the
socket through which "leasehold release" in CMD resigns early (see
"leasehold run --help").
Pass the term to what the leader writes, so that a deposed leader's late
writes can be rejected.

CMD runs in a process group of its own, exactly as under "leasehold run":
signals go to the whole group, and if leadership is lost while CMD runs
(renewals stop being confirmed, or the store refuses them), the whole group
is stopped before another instance can be granted leadership: SIGTERM GRACE
before the lease's local deadline, SIGKILL at the deadline. If this elect
process dies (SIGKILL, crash, OOM), the group is killed at once; if it is
stopped or starved, at the lease's local deadline. Then, with --on-lost
exit (the default), elect exits 76; with --on-lost restart it becomes a
standby again and reruns CMD when it next wins.

When CMD exits by itself, what it left running in its group is stopped
(SIGTERM, SIGKILL 1s later), then elect resigns and exits with CMD's exit
code. See docs/wrappers.md for exactly what is guaranteed.

Exit codes: CMD's own, or 64 usage error, 70 store error, 76 leadership
lost (--on-lost exit), 126/127 CMD cannot run, 128+N on signal N while
opening the store or waiting.`

const electExample = `  # On both nodes of an active/passive pair:
  leasehold elect --store postgres://db/app --ttl 10s payments/primary -- ./payments-server

  # Keep campaigning after losing leadership (e.g. after a network blip):
  leasehold elect --on-lost restart scheduler -- ./scheduler --term-from-env`

func newElectCmd(e *env) *cobra.Command {
	o := &runOptions{verb: "elect", elect: true, notAcquired: ExitNotAcquired}
	cmd := &cobra.Command{
		Use:     "elect [flags] NAME -- CMD [ARGS...]",
		Short:   "Run a command only while this instance is the elected leader",
		Long:    electLong,
		Example: electExample,
		RunE: wrapRun(func(cmd *cobra.Command, args []string) error {
			if err := o.parse(cmd, args); err != nil {
				return err
			}
			if o.onLost != "exit" && o.onLost != "restart" {
				return usagef("elect: --on-lost %q must be exit or restart", o.onLost)
			}
			return o.run(cmd.Context(), e)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.store, "store", "", "store URL (default $LEASEHOLD_STORE, else the default SQLite file)")
	durationFlag(f, &o.ttl, "ttl", leasehold.DefaultTTL, "leader lease time to live; a dead leader is replaced within it")
	f.StringVar(&o.owner, "owner", "", "this instance's identity (default HOSTNAME/PID/RANDOM)")
	durationFlag(f, &o.grace, "grace", 0, "SIGTERM CMD this long before the lease's deadline if no renewal was confirmed (default TTL/3, or half the renewal window if TTL/3 is not inside it)")
	f.StringVar(&o.data, "data", "", "data to publish with the leadership (e.g. this node's address)")
	f.StringVar(&o.onLost, "on-lost", "exit", "after leadership is lost: exit (76) or restart (campaign again)")
	return cmd
}
