package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/storekit"
)

const releaseLong = `Release frees the lease NAME, checked by owner and fencing token: it is
released only if that owner holds it with that token, so a release can
never free a later holder's grant.

The owner and token come from --owner and --token, else from
$LEASEHOLD_OWNER and $LEASEHOLD_TOKEN, which "run" and "elect" set for
their command (so a command can release its own lease early). A command
that releases its own lease so asks the "run" (or "elect") that started it
to release it: run then stops supervising (no SIGTERM, no kill at the
lease's deadline), the command goes on without the lease, and run exits
with the command's status. Through a
lease server that has auth on, the grant's secret is needed too (its
proof of holding the lease, which the server gives only to the
acquirer): --secret, else $LEASEHOLD_SECRET, which "run" and "elect"
also set ("hold --json" prints it); with auth off a release without it
succeeds, and a wrong one is refused. For a
permit of a semaphore, NAME is the permit's lease (NAME/permit/I, in
$LEASEHOLD_PERMIT); given the semaphore's NAME, release uses
$LEASEHOLD_PERMIT when it names one of NAME's permits.

Releasing one's own grant that is already free (released, force-released,
or expired and not taken since) succeeds too, while the store remembers
that grant (the lease server: at least 10 minutes).

The holder, if it is a "hold" or "run", learns of the release at its next
renewal and exits 76 (for "run", after stopping its command).

Release (and force-release) never creates or migrates a store: a SQLite
file named by --store or $LEASEHOLD_STORE that does not exist, or a
PostgreSQL or DynamoDB table that does not exist, is a usage error naming
it (nothing is created); a PostgreSQL table of an older schema version is
refused (exit 70). Releasing in a SQLite file this user may not write
fails (exit 70) saying that it needs write access to the file and its
directory.

Exit codes:
  0   released
  64  usage error: bad name, owner or token, or none given (nothing changed)
  70  store or internal error
  76  not held by that owner and token: never granted to it, expired and
      taken over, or released by someone else; or, through a lease
      server, the secret does not match, or is missing with the
      server's auth on (nothing changed)`

const forceReleaseLong = `Force-release frees the lease NAME whoever holds it: an operator's tool
for a holder that is stuck. The holder is not told; it learns at its next
renewal (and "run" then stops its command and exits 76). Anyone relying on
the lease's fencing token is still protected: the next grant gets a greater
token.

On a terminal it shows the holder and asks for confirmation; --yes skips
the question. Without a terminal it refuses unless --yes is given.

Through the lease server (http://, https://, leasehold://, leaseholds://)
this is the server's force-release (it needs admin access when the server
has auth on). On a store used directly (sqlite, memory, postgres, redis,
dynamodb, etcd) it releases the holder's grant by its owner and token as
read just before: if the lease changed hands in between, nothing is
released and it says so. Like release, it never creates or migrates a
store: a SQLite file, PostgreSQL table or DynamoDB table that does not
exist is a usage error naming it (nothing is created).

Exit codes:
  0   released
  1   the answer was not y (nothing changed)
  64  usage error, or no terminal to confirm on and no --yes (nothing
      changed)
  70  store or internal error
  76  not held (nothing to release), or the holder changed before the
      release (nothing changed)`

// secretSource says where release's secret came from, for a message.
func secretSource(cmd *cobra.Command) string {
	if cmd.Flags().Changed("secret") {
		return "--secret"
	}
	return "$" + envSecret
}

// forceReleaser is implemented by the stores that talk to the lease server.
type forceReleaser interface {
	ForceRelease(ctx context.Context, name string) (leasehold.Record, error)
}

func newReleaseCmd(e *env) *cobra.Command {
	var store, owner, token, secret string
	cmd := &cobra.Command{
		Use:   "release [flags] NAME",
		Short: "Release a lease held by an owner with a token",
		Long:  releaseLong,
		Example: `  # In a command started by "leasehold run": release early, go on unlocked.
  leasehold run deploy/prod -- sh -c 'migrate-db; leasehold release "$LEASEHOLD_NAME"; warm-caches'

  leasehold release deploy/prod --owner web1/deploy --token 7`,
		Args: cobra.ExactArgs(1),
		RunE: wrapRun(func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if !cmd.Flags().Changed("owner") {
				owner = os.Getenv("LEASEHOLD_OWNER")
			}
			if !cmd.Flags().Changed("token") {
				token = os.Getenv("LEASEHOLD_TOKEN")
				if p := os.Getenv("LEASEHOLD_PERMIT"); strings.HasPrefix(p, name+"/permit/") {
					name = p
				}
			}
			if owner == "" {
				return usagef("release: no owner: give --owner or set $LEASEHOLD_OWNER")
			}
			if token == "" {
				return usagef("release: no token: give --token or set $LEASEHOLD_TOKEN")
			}
			tok, err := strconv.ParseUint(token, 10, 64)
			if err != nil || tok == 0 {
				return usagef("release: token %q is not a fencing token (a decimal number above 0)", token)
			}
			if err := storekit.ValidateHolder(name, owner, tok); err != nil {
				return usagef("release: %v", err)
			}
			// The command's own grant: the run that started it releases
			// it and stops supervising (control.go).
			if path, ok := ownGrant(name, owner, tok); ok {
				handled, err := askRun(path, name, owner, tok)
				switch {
				case handled && errors.Is(err, leasehold.ErrNotHeld):
					return exitf(ExitLost, "release: %s (token %d): %v", visible(name), tok, err)
				case handled && err != nil:
					return exitf(ExitInternal, "release %s: %v", visible(name), err)
				case handled:
					fmt.Fprintf(e.stderr, "leasehold: released %s (owner %s, token %d); this command goes on without it\n", visible(name), visible(owner), tok)
					return nil
				}
			}
			s, err := e.openExistingStore(cmd.Context(), store)
			if err != nil {
				return err
			}
			defer s.Close()
			if !cmd.Flags().Changed("secret") {
				secret = os.Getenv(envSecret)
			}
			useSecret(s, name, owner, tok, secret)
			err = s.Release(cmd.Context(), name, owner, tok)
			switch {
			case errors.Is(err, remote.ErrBadProof) && secret == "":
				return exitf(ExitLost, "release: the lease server refused: no secret (holder proof) was given for %s (owner %s, token %d); give the grant's secret with --secret or $%s (\"hold --json\" prints it); nothing changed", visible(name), visible(owner), tok, envSecret)
			case errors.Is(err, remote.ErrBadProof):
				return exitf(ExitLost, "release: the lease server refused: the secret given (holder proof, from %s) does not match the grant of %s to %s with token %d; nothing changed", secretSource(cmd), visible(name), visible(owner), tok)
			case errors.Is(err, leasehold.ErrNotHeld):
				return exitf(ExitLost, "release: %s is not held by %s with token %d (it expired and was taken over, was released, or never was theirs); nothing changed", visible(name), visible(owner), tok)
			case err != nil:
				return classify(err, "release %s", visible(name))
			}
			fmt.Fprintf(e.stderr, "leasehold: released %s (owner %s, token %d)\n", visible(name), visible(owner), tok)
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&store, "store", "", "store URL (default $LEASEHOLD_STORE, else the default SQLite file)")
	f.StringVar(&owner, "owner", "", "the holder's owner identity (default $LEASEHOLD_OWNER)")
	f.StringVar(&token, "token", "", "the holder's fencing token (default $LEASEHOLD_TOKEN)")
	f.StringVar(&secret, "secret", "", "through a lease server: the grant's secret, its holder proof, needed when the server has auth on (default $LEASEHOLD_SECRET)")
	return cmd
}

func newForceReleaseCmd(e *env) *cobra.Command {
	var store string
	var yes bool
	cmd := &cobra.Command{
		Use:   "force-release [flags] NAME",
		Short: "Free a lease whoever holds it (operators; asks first)",
		Long:  forceReleaseLong,
		Example: `  leasehold force-release deploy/prod
  leasehold force-release --yes --store http://leases.internal:7070 deploy/prod`,
		Args: cobra.ExactArgs(1),
		RunE: wrapRun(func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := storekit.ValidateName(name); err != nil {
				return usagef("force-release: %v", err)
			}
			in, interactive := e.terminalIn()
			if !yes && !interactive {
				return usagef("force-release: no terminal to confirm on; give --yes to release %s without asking", visible(name))
			}
			ctx := cmd.Context()
			s, err := e.openExistingStore(ctx, store)
			if err != nil {
				return err
			}
			defer s.Close()
			rec, err := s.Get(ctx, name)
			switch {
			case errors.Is(err, leasehold.ErrNotFound):
				return exitf(ExitLost, "force-release: %s is not held; nothing to release", visible(name))
			case err != nil:
				return classify(err, "force-release %s", visible(name))
			}
			if !yes {
				fmt.Fprintf(e.stderr, "Force-release %s, held by %s (token %d, expires in %s)? [y/N] ",
					visible(name), visible(rec.Owner), rec.Token, roundDuration(rec.Remaining))
				line, _ := bufio.NewReader(in).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
					return exitf(ExitDeclined, "force-release: not confirmed; nothing changed")
				}
			}
			if fr, ok := s.(forceReleaser); ok {
				rec, err = fr.ForceRelease(ctx, name)
				switch {
				case errors.Is(err, leasehold.ErrNotFound):
					return exitf(ExitLost, "force-release: %s is not held any more; nothing to release", visible(name))
				case err != nil:
					return classify(err, "force-release %s", visible(name))
				}
			} else {
				err = s.Release(ctx, name, rec.Owner, rec.Token)
				switch {
				case errors.Is(err, leasehold.ErrNotHeld):
					return exitf(ExitLost, "force-release: %s changed hands (or expired) after it was read as held by %s with token %d; nothing changed", visible(name), visible(rec.Owner), rec.Token)
				case err != nil:
					return classify(err, "force-release %s", visible(name))
				}
			}
			fmt.Fprintf(e.stderr, "leasehold: force-released %s (was held by %s, token %d)\n", visible(name), visible(rec.Owner), rec.Token)
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&store, "store", "", "store URL (default $LEASEHOLD_STORE, else the default SQLite file)")
	f.BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation (needed without a terminal)")
	return cmd
}

// terminalIn returns stdin and whether both it and stderr (where the
// question goes) are terminals.
func (e *env) terminalIn() (*os.File, bool) {
	f, ok := e.stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) || terminalFD(e.stderr) < 0 {
		return nil, false
	}
	return f, true
}
