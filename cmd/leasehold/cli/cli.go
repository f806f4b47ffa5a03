// Package cli implements the leasehold command. Its subcommands:
//
//   - run: run a command while holding a lease (--permits N: one of N)
//   - elect: run a command only while this instance is the elected leader
//   - hold: hold a lease until interrupted, keeping it alive
//   - release: release a lease by its owner and token
//   - force-release: free a lease whoever holds it (operators)
//   - status: list live leases
//   - store init: create what a store needs (table, schema, file)
//   - serve: run the lease server (HTTP API, dashboard, metrics, RESP)
//   - sfn: write a Step Functions state machine that runs a task under a lock
//   - demo: workers taking turns on one lease
//   - version: print the version
//   - completion: print a shell completion script (bash, zsh, fish)
//
// ManPages makes a manual page per command from the same help texts
// (docs/man, go generate).
//
// The command is a thin layer over package leasehold: stores are opened by
// URL with package stores, and every failure is mapped to one of the exit
// codes below so that scripts can branch on the outcome.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/stores"
)

// Version is the version printed by "leasehold version". Release builds set
// it with -ldflags "-X github.com/leasehold/leasehold/cmd/leasehold/cli.Version=v1.2.3";
// left at "dev", the module version recorded by "go install" is printed
// instead when there is one.
var Version = "dev"

// Exit codes of the leasehold command. "run" otherwise exits with its
// child's status (128+N if the child died from signal N).
const (
	// ExitOK means success.
	ExitOK = 0
	// ExitDeclined means the user answered no to a question (the
	// confirmation of force-release): nothing changed.
	ExitDeclined = 1
	// ExitUsage (EX_USAGE) means bad flags or arguments, including an
	// invalid lease name, owner, TTL, grace or store URL. Nothing was
	// written to the store.
	ExitUsage = 64
	// ExitInternal (EX_SOFTWARE) means the store failed or another internal
	// error happened.
	ExitInternal = 70
	// ExitNotAcquired (EX_TEMPFAIL) means the lease was not acquired:
	// --no-wait found it held, or --wait timed out.
	ExitNotAcquired = 75
	// ExitLost (EX_PROTOCOL) means the lease was lost, or could not be
	// renewed in time, while the child ran; the child was terminated.
	ExitLost = 76
	// ExitMismatch (EX_CONFIG) means NAME is in use otherwise than asked:
	// a semaphore with another permit count (--permits), or a semaphore
	// asked for as a plain lease or the other way round. Nothing is held
	// (a permit or lease taken before the check was released).
	ExitMismatch = 78
	// ExitCannotExec means the command was found but could not be started.
	ExitCannotExec = 126
	// ExitNotFound means the command was not found.
	ExitNotFound = 127
)

// exitError carries an exit code and the one-line message printed for it.
// An empty message prints nothing (the child's own status, for example).
type exitError struct {
	code int
	msg  string
	// unreachable: opening the store failed for want of an answer (a
	// refused connection, no route, no answer within the connect
	// timeout), which a wait without --wait tries again (openWaiting).
	unreachable bool
}

func (e *exitError) Error() string { return e.msg }

func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// usagef reports a usage error (exit 64).
func usagef(format string, args ...any) error { return exitf(ExitUsage, format, args...) }

// classify maps an error from the leasehold API to a usage error (invalid
// argument) or an internal one.
func classify(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if msg != "" {
		msg += ": "
	}
	if errors.Is(err, leasehold.ErrMismatch) {
		return exitf(ExitMismatch, "%s%v", msg, err)
	}
	if errors.Is(err, leasehold.ErrInvalid) {
		return exitf(ExitUsage, "%s%v", msg, err)
	}
	return exitf(ExitInternal, "%s%v", msg, err)
}

// env is what a command needs from its surroundings, so tests can swap it.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// open opens a store from a URL; stores.Open unless a test says
	// otherwise.
	open func(ctx context.Context, url string) (leasehold.Store, error)
	// openExisting opens a store that must exist already (status,
	// release): stores.OpenExisting unless a test says otherwise.
	openExisting func(ctx context.Context, url string) (leasehold.Store, error)
	// connectTimeout is --connect-timeout (store.go, openStore).
	connectTimeout connectTimeout
	// completing is what "leasehold __complete" (the completion scripts)
	// got: the words after "leasehold", the last one the word to
	// complete (completion.go, completeArgs).
	completing []string
	// clock is the time of the leases of run, elect and hold and of the
	// watchdog of run's command (its grace window, its kill time); nil is
	// the real clock. The keeper of the command's group always enforces
	// the deadlines passed on to it on the host's clocks.
	clock clock.Clock
}

// Main runs the leasehold command with args (without the program name),
// writing to stdout and stderr, and returns the process exit code. The
// child of "run" reads os.Stdin.
//
// A process that "run" or "elect" started as the keeper of a command's
// process group runs the keeper instead (see KeeperRequested), whatever
// args say.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if KeeperRequested() {
		return RunKeeper()
	}
	e := &env{stdin: os.Stdin, stdout: stdout, stderr: stderr, open: stores.Open, openExisting: stores.OpenExisting}
	return e.main(ctx, args)
}

func (e *env) main(ctx context.Context, args []string) int {
	if len(args) > 1 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) {
		e.completing = args[1:]
	}
	root := newRoot(e)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// Errors that cobra itself returns: unknown command or flag,
		// wrong number of arguments.
		ee = &exitError{code: ExitUsage, msg: err.Error()}
	}
	if ee.msg != "" {
		fmt.Fprintf(e.stderr, "leasehold: %s\n", ee.msg)
		if ee.code == ExitUsage {
			// The help of the command that refused its arguments.
			path := root.CommandPath()
			if cmd != nil {
				path = cmd.CommandPath()
			}
			fmt.Fprintf(e.stderr, "Run '%s --help' for usage.\n", path)
		}
	}
	return ee.code
}

// wrapRun makes every error a RunE returns carry an exit code: invalid
// arguments become usage errors, anything else an internal error.
func wrapRun(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := f(cmd, args)
		var ee *exitError
		if err == nil || errors.As(err, &ee) {
			return err
		}
		return classify(err, "")
	}
}

func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "leasehold",
		Short: "Distributed leases and locks from the command line",
		Long: `leasehold takes named, expiring leases with fencing tokens from a store,
and runs commands while holding them.

The store is named by a URL (--store), else by $` + stores.EnvStore + `, else it is
the default SQLite file (` + defaultPathHint() + `):

  sqlite:///var/lib/leasehold/leases.db   one file shared by the processes of a host
  sqlite:./leases.db                      relative to the working directory (./ or ../ required)
  memory://                               in this process only (useful for "demo")
  postgres://user@db.internal/leases      PostgreSQL (also postgresql://)
  redis://127.0.0.1:6379/0                Redis, one instance (rediss:// for TLS)
  dynamodb://TABLE?region=eu-west-1       a DynamoDB table ("leasehold store init")
  etcd://10.0.0.1:2379                    etcd v3 (etcds:// for TLS)
  http://127.0.0.1:7070                   a "leasehold serve" over HTTP (https://)
  leasehold://127.0.0.1:7071              a "leasehold serve" over RESP (leaseholds://)

The URL parameters of each engine are in docs/stores/ and docs/server.md.
Opening a networked store gives up after --connect-timeout (default 10s),
or the URL's connect_timeout=5s; Ctrl-C or SIGTERM ends the wait (130/143).`,
		Example: `  leasehold run backup/nightly -- /usr/local/bin/backup.sh
  leasehold run -n -E 0 backup/nightly -- backup.sh   # skip quietly if running
  leasehold hold deploy/prod                           # until Ctrl-C
  leasehold status
  leasehold demo --workers 3`,
		Version:       versionLine(),
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SetOut(e.stderr)
			_ = cmd.Help()
			return usagef("missing command")
		},
	}
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetIn(e.stdin)
	root.PersistentFlags().Var(&e.connectTimeout, "connect-timeout", connectTimeoutUsage)
	root.SetVersionTemplate("leasehold {{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newRunCmd(e), newElectCmd(e), newStatusCmd(e), newStoreCmd(e), newSfnCmd(e), newDemoCmd(e), newVersionCmd(e), newServeCmd(e),
		newHoldCmd(e), newReleaseCmd(e), newForceReleaseCmd(e))
	root.AddCommand(newCompletionCmd(e), newCommandStartCmd(e))
	setCompletions(root, e)
	return root
}

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of leasehold",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintf(e.stdout, "leasehold %s\n", versionLine())
			return err
		},
	}
}

// version returns Version, or when that was not set at build time, the
// module version "go install" recorded, if any.
func version() string {
	if Version != "dev" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return Version
}

func defaultPathHint() string {
	p, err := stores.DefaultPath()
	if err != nil {
		return "~/.local/share/leasehold/leases.db"
	}
	return p
}
