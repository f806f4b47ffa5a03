package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// statusJSON is one lease in the output of "status --json".
type statusJSON struct {
	Name        string `json:"name"`
	Owner       string `json:"owner"`
	Token       uint64 `json:"token"`
	Acquired    string `json:"acquired"` // RFC 3339 with nanoseconds
	RemainingMS int64  `json:"remaining_ms"`
	TTLMS       int64  `json:"ttl_ms"`
	Data        string `json:"data"`
}

const statusLong = `Status lists the live leases whose names start with PREFIX (all if PREFIX
is omitted), sorted by name: their owner, fencing token, when they were
granted (local time) and the time left before they expire unless renewed.

Names and owners are shown as the dashboard shows them: printable ASCII as
it is, anything else escaped (\u202E, \xE9, \x1B; a backslash doubled),
so that no name can reorder or hide its row or look like another; --json
gives them as they are.

With --json it prints a JSON array (empty: []) of objects with the fields
name, owner, token, acquired (RFC 3339, nanoseconds), remaining_ms, ttl_ms
and data.

Status never creates or migrates a store: a SQLite file named by --store
or $LEASEHOLD_STORE that does not exist, or a PostgreSQL or DynamoDB table
that does not exist, is a usage error naming it (exit 64; nothing is
created), and the default file, before any run or hold made it, lists no
leases. A PostgreSQL table of an older schema version is refused (exit 70)
until a run, hold or "store init" upgrades it. A SQLite file this user may
read but not write (made by another user) is read read-only.

Exit codes: 0 success, 64 usage error, 70 store error.`

const statusExample = `  leasehold status
  leasehold status backup/
  leasehold status --json --store sqlite:///var/lib/leasehold/leases.db | jq .`

func newStatusCmd(e *env) *cobra.Command {
	var store string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "status [flags] [PREFIX]",
		Short:   "List live leases",
		Long:    statusLong,
		Example: statusExample,
		Args:    cobra.MaximumNArgs(1),
		RunE: wrapRun(func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			if err := storekit.ValidatePrefix(prefix); err != nil {
				return usagef("status: %v", err)
			}
			s, err := e.openExistingStore(cmd.Context(), store)
			if err != nil {
				return err
			}
			defer s.Close()
			recs, err := s.List(cmd.Context(), prefix)
			if err != nil {
				return classify(err, "status: list leases")
			}
			if asJSON {
				return writeStatusJSON(e.stdout, recs)
			}
			return writeStatusTable(e.stdout, recs)
		}),
	}
	cmd.Flags().StringVar(&store, "store", "", "store URL (default $LEASEHOLD_STORE, else the default SQLite file)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array instead of a table")
	return cmd
}

func writeStatusJSON(w io.Writer, recs []leasehold.Record) error {
	out := make([]statusJSON, 0, len(recs))
	for _, r := range recs {
		out = append(out, statusJSON{
			Name: r.Name, Owner: r.Owner, Token: r.Token,
			Acquired:    r.Acquired.Format(time.RFC3339Nano),
			RemainingMS: r.Remaining.Milliseconds(),
			TTLMS:       r.TTL.Milliseconds(),
			Data:        string(r.Data),
		})
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func writeStatusTable(w io.Writer, recs []leasehold.Record) error {
	if len(recs) == 0 {
		_, err := fmt.Fprintln(w, "no leases")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tOWNER\tTOKEN\tACQUIRED\tREMAINING")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", visible(r.Name), visible(r.Owner), r.Token,
			r.Acquired.Local().Format(time.DateTime), roundDuration(r.Remaining))
	}
	return tw.Flush()
}
