package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/stores"
)

const storeInitLong = `Init prepares a store for leasehold ahead of time: it creates the tables
(or schema, or file) that the store would otherwise create when it is first
opened, so that operators can run it once with rights the applications do
not need. It is safe to run again.

The store is named by --store, else by $` + stores.EnvStore + `, else it is the
default SQLite file.

Exit codes: 0 success, 64 usage error, 70 store error.`

func newStoreCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Manage a store",
		Args:  cobra.NoArgs,
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
			if err := stores.Init(cmd.Context(), store); err != nil {
				return classify(err, "store init")
			}
			fmt.Fprintln(e.stdout, "store initialised")
			return nil
		}),
	}
	initCmd.Flags().StringVar(&store, "store", "", "store URL (default $LEASEHOLD_STORE, else the default SQLite file)")
	cmd.AddCommand(initCmd)
	return cmd
}
