package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// completionShells are the shells "leasehold completion" writes scripts
// for, in the order its help lists them.
var completionShells = []string{"bash", "zsh", "fish"}

func newCompletionCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print the shell completion script for bash, zsh or fish",
		Long: `Completion prints a script that makes the shell complete leasehold's
commands, flags and flag values (store URL schemes, log formats, files
where a flag takes a file). The script asks leasehold itself what to
complete, so it stays right for the leasehold found in PATH.

Lease names are not completed (that would mean opening the store on every
Tab); after "--", run and elect complete the command as the shell would.

Install it once, for every user (as root) or for yourself:

  bash:  leasehold completion bash > /usr/share/bash-completion/completions/leasehold
         leasehold completion bash > ~/.local/share/bash-completion/completions/leasehold
         (needs the bash-completion package)
  zsh:   leasehold completion zsh > /usr/local/share/zsh/site-functions/_leasehold
         (or any directory of $fpath; compinit must be run in .zshrc)
  fish:  leasehold completion fish > /usr/share/fish/vendor_completions.d/leasehold.fish
         leasehold completion fish > ~/.config/fish/completions/leasehold.fish

or load it into the running shell only:

  source <(leasehold completion bash)      # bash, zsh
  leasehold completion fish | source       # fish`,
		Example: `  leasehold completion bash > /usr/share/bash-completion/completions/leasehold`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("completion: name one shell: %s", strings.Join(completionShells, ", "))
			}
			return nil
		},
		ValidArgs: completionShells,
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(e.stdout, true)
			case "zsh":
				return root.GenZshCompletion(e.stdout)
			case "fish":
				return root.GenFishCompletion(e.stdout, true)
			}
			return usagef("completion: unknown shell %q (want %s)", args[0], strings.Join(completionShells, ", "))
		},
	}
	return cmd
}

// storeSchemes are offered for --store: the schemes of the URLs the root
// command's help lists.
var storeSchemes = []string{
	"sqlite://", "sqlite:./", "memory://", "postgres://", "postgresql://",
	"redis://", "rediss://", "dynamodb://", "etcd://", "etcds://",
	"http://", "https://", "leasehold://", "leaseholds://",
}

// setCompletions adds the command's own completions to the tree under
// root: flag values that have a known set or are files, and positional
// arguments that are lease names (nothing to complete: not files). It
// leaves alone flags and commands it does not find, so that it never
// fails on a tree being changed.
func setCompletions(root *cobra.Command) {
	values := map[string][]string{
		"log-format": {"text", "json"},
		"log-level":  {"debug", "info", "warn", "error"},
		"on-lost":    {"exit", "restart"},
		"format":     {"machine", "cleanup", "cloudformation", "terraform"},
	}
	files := map[string]bool{
		"auth-file": true, "tls-cert": true, "tls-key": true, "client-ca": true,
		"holder-key-file": true, "workflows": true, "task": true, "output": true,
	}
	dirs := map[string]bool{"data-dir": true}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) { setFlagCompletion(c, f.Name, values, files, dirs) })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { setFlagCompletion(c, f.Name, values, files, dirs) })
		if c.ValidArgsFunction == nil && len(c.ValidArgs) == 0 && c.HasParent() {
			c.ValidArgsFunction = completeArgs
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func setFlagCompletion(c *cobra.Command, name string, values map[string][]string, files, dirs map[string]bool) {
	var fn cobra.CompletionFunc
	switch {
	case name == "store":
		fn = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return storeSchemes, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
		}
	case values[name] != nil:
		fn = cobra.FixedCompletions(values[name], cobra.ShellCompDirectiveNoFileComp)
	case files[name]:
		fn = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveDefault
		}
	case dirs[name]:
		fn = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveFilterDirs
		}
	default:
		// Names, durations, numbers, owners, secrets: never files.
		fn = cobra.NoFileCompletions
	}
	if _, exists := c.GetFlagCompletionFunc(name); exists {
		return
	}
	if err := c.RegisterFlagCompletionFunc(name, fn); err != nil {
		panic(fmt.Sprintf("completion of --%s of %s: %v", name, c.CommandPath(), err))
	}
}

// completeArgs completes a command's positional arguments: lease names
// and prefixes (nothing: they are not files), and for run and elect the
// command after NAME (as the shell would: files). It cannot tell "run NAME
// <Tab>" from "run NAME -- <Tab>" (cobra's completion adds a "--" of its
// own before asking), so both complete as the command.
func completeArgs(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if strings.Contains(cmd.Use, " -- ") && len(args) >= 1 {
		return nil, cobra.ShellCompDirectiveDefault
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}
