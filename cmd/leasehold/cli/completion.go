package cli

import (
	"fmt"
	"io"
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
Tab). After the NAME of run and elect, Tab offers "--"; after the "--",
the command completes as the shell completes a command line of its own:
its name (programs in PATH, functions, builtins), then its arguments by
its own completion, or files.

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
			script, err := completionScript(cmd.Root(), args[0])
			if err != nil {
				return err
			}
			_, err = io.WriteString(e.stdout, script)
			return err
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
// arguments that are lease names (nothing to complete: not files), with
// "--" after the NAME of run and elect. It leaves alone flags and commands
// it does not find, so that it never fails on a tree being changed.
func setCompletions(root *cobra.Command, e *env) {
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
			c.ValidArgsFunction = e.completeArgs
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
// and prefixes complete to nothing (they are not files); after the NAME of
// run and elect it offers "--". The command after "--" is completed by
// the shell (the scripts' code from completion_shells.go), which asks
// "leasehold __command_start" where it begins; should a script ask here
// all the same, it gets the shell's default (files).
func (e *env) completeArgs(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if !takesCommand(cmd) || len(e.completing) == 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	// e.completing: the words after "leasehold", the last one the word
	// being completed. cobra's args cannot tell "run NAME <Tab>" from
	// "run NAME -- <Tab>" (it adds a "--" of its own before parsing).
	words := e.completing[:len(e.completing)-1]
	switch state, _ := commandLineState(words); state {
	case stateDash:
		if strings.HasPrefix("--", toComplete) {
			return []cobra.Completion{cobra.CompletionWithDesc("--", "the command to run follows")}, cobra.ShellCompDirectiveNoFileComp
		}
	case stateCommand:
		return nil, cobra.ShellCompDirectiveDefault
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// takesCommand says whether c runs a command given after "NAME --" (run,
// elect).
func takesCommand(c *cobra.Command) bool {
	return strings.Contains(c.Use, " NAME -- CMD")
}

// The states of a run or elect command line before the word at the cursor.
const (
	stateOther   = iota // not run or elect, or a line they refuse
	stateName           // NAME comes next
	stateDash           // NAME given: "--" comes next
	stateCommand        // in the command: its name or its arguments
)

// commandLineState reads words, the words after "leasehold" that come
// before the one at the cursor, as "leasehold run" and "elect" parse them
// (run.go, parse): flags of the command and of leasehold, NAME, "--",
// CMD ARGS, or "-- -NAME -- CMD ARGS". In stateCommand, dashes is how many
// words "--" there are up to the one after which the command begins (a
// "--" can also be a flag's value or an argument of the command).
func commandLineState(words []string) (state, dashes int) {
	root := newRoot(&env{})
	cmd, rest, err := root.Find(words)
	if err != nil || !takesCommand(cmd) {
		return stateOther, 0
	}
	cmd.InitDefaultHelpFlag()
	fs := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.AddFlagSet(cmd.Flags())
	fs.AddFlagSet(cmd.InheritedFlags())
	if err := fs.Parse(rest); err != nil {
		return stateOther, 0
	}
	args, dash := fs.Args(), fs.ArgsLenAtDash()
	var after []string // the words of the command before the cursor
	switch {
	case dash < 0 && len(args) == 0, dash == 0 && len(args) == 0:
		return stateName, 0
	case dash < 0 && len(args) == 1, dash == 0 && len(args) == 1:
		return stateDash, 0
	case dash == 1:
		after = args[1:]
	case dash == 0 && args[1] == "--":
		after = args[2:]
	default:
		return stateOther, 0
	}
	for _, w := range words[:len(words)-len(after)] {
		if w == "--" {
			dashes++
		}
	}
	return stateCommand, dashes
}

// newCommandStartCmd is the hidden command the completion scripts run
// when a "--" comes before the word at the cursor: given the words after
// "leasehold" before that word, it prints N when the word belongs to the
// command of run or elect, which begins after the N-th word "--"; it
// prints nothing otherwise.
func newCommandStartCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:                commandStartCmd + " [WORD...]",
		Short:              "Where the command of run or elect begins (for the completion scripts)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if state, dashes := commandLineState(args); state == stateCommand {
				_, err := fmt.Fprintln(e.stdout, dashes)
				return err
			}
			return nil
		},
	}
}
