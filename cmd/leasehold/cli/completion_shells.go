package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// commandStartCmd is the hidden command the scripts ask where the command
// of run or elect begins (completion.go, newCommandStartCmd).
const commandStartCmd = "__command_start"

// completionScript is cobra's completion script for shell, with the code
// that completes the command after "--" of run and elect as the shell
// completes a command line: its name (commands in PATH, functions,
// builtins), then its arguments through its own completion, or files.
// cobra's scripts cannot do that: they can only offer words leasehold
// names, or files.
func completionScript(root *cobra.Command, shell string) (string, error) {
	var b strings.Builder
	var err error
	switch shell {
	case "bash":
		err = root.GenBashCompletionV2(&b, true)
	case "zsh":
		err = root.GenZshCompletion(&b)
	case "fish":
		err = root.GenFishCompletion(&b, true)
	default:
		return "", usagef("completion: unknown shell %q (want %s)", shell, strings.Join(completionShells, ", "))
	}
	if err != nil {
		return "", err
	}
	name := root.Name()
	script := b.String()
	switch shell {
	case "bash":
		// Registered after cobra's __start_NAME, in its place.
		script += fmt.Sprintf(bashCommandCompletion, name, commandStartCmd)
	case "zsh":
		// cobra's _NAME becomes __NAME_cobra, which ours calls unless
		// the word is the command's. The script's last lines call _NAME
		// when zsh autoloads the file: ours, defined before them.
		def := fmt.Sprintf("\n_%s()\n{\n", name)
		if strings.Count(script, def) != 1 {
			return "", exitf(ExitInternal, "completion: the zsh script of this cobra version does not define _%s as expected", name)
		}
		script = strings.Replace(script, def,
			fmt.Sprintf(zshCommandCompletion, name, commandStartCmd)+fmt.Sprintf("\n__%s_cobra()\n{\n", name), 1)
	case "fish":
		script += fmt.Sprintf(fishCommandCompletion, name, commandStartCmd)
	}
	return script, nil
}

// bashCommandCompletion: %[1]s is the program's name, %[2]s the hidden
// command. _command_offset is bash-completion's (as for sudo): from a word
// on, complete as a command line of its own.
const bashCommandCompletion = `
# After "--", "%[1]s run" and "%[1]s elect" complete the command as a command
# line of its own: its name, then its arguments by its own completion.
__%[1]s_start_or_command()
{
    local i n=0
    for ((i = 1; i < COMP_CWORD; i++)); do
        [[ ${COMP_WORDS[i]} == -- ]] && n=1
    done
    if ((n)) && declare -F _command_offset >/dev/null 2>&1 && declare -F _get_comp_words_by_ref >/dev/null 2>&1; then
        local cur prev words cword
        _get_comp_words_by_ref -n =: cur prev words cword
        n=$(eval "${words[0]} %[2]s ${words[*]:1:cword-1}" 2>/dev/null </dev/null)
        if [[ $n =~ ^[1-9][0-9]*$ ]]; then
            # The command begins after the n-th word "--" (one that is not
            # the end of a word bash split at "=" or ":").
            for ((i = 1; i < COMP_CWORD; i++)); do
                if [[ ${COMP_WORDS[i]} == -- && ${COMP_WORDS[i-1]} != [=:] ]] && ((--n == 0)); then
                    _command_offset $((i + 1))
                    return
                fi
            done
        fi
    fi
    __start_%[1]s "$@"
}

if [[ $(type -t compopt) = "builtin" ]]; then
    complete -o default -F __%[1]s_start_or_command %[1]s
else
    complete -o default -o nospace -F __%[1]s_start_or_command %[1]s
fi
`

// zshCommandCompletion: %[1]s is the program's name, %[2]s the hidden
// command. _normal completes words as a command line of its own (as
// _precommand does for nice or nohup).
const zshCommandCompletion = `
# After "--", "%[1]s run" and "%[1]s elect" complete the command as a command
# line of its own: its name, then its arguments by its own completion.
_%[1]s()
{
    local n i
    if (( CURRENT > 2 && ${${(@)words[2,CURRENT-1]}[(Ie)--]} )); then
        n=$(eval "${words[1]} %[2]s ${words[2,CURRENT-1]}" 2>/dev/null </dev/null)
        if [[ $n == <1-> ]]; then
            # The command begins after the n-th word "--".
            for (( i = 2; i < CURRENT; i++ )); do
                if [[ ${words[i]} == -- ]] && (( --n == 0 )); then
                    words=("${(@)words[i+1,-1]}")
                    (( CURRENT -= i ))
                    _normal
                    return
                fi
            done
        fi
    fi
    __%[1]s_cobra "$@"
}
`

// fishCommandCompletion: %[1]s is the program's name, %[2]s the hidden
// command. complete -C completes the command's words as a command line of
// its own (as __fish_complete_subcommand does for sudo). cobra's own entries offer nothing there (the
// command's words get the shell's default from leasehold, which they
// leave to this entry's -f).
const fishCommandCompletion = `
# After "--", "%[1]s run" and "%[1]s elect" complete the command as a command
# line of its own: its name, then its arguments by its own completion.
# __%[1]s_command_words prints the command's words before the cursor, one a
# line, and fails when the cursor is not in the command.
function __%[1]s_command_words
    set -l words (commandline -opc)
    contains -- -- $words[2..-1]; or return 1
    set -l n ($words[1] %[2]s $words[2..-1] 2>/dev/null </dev/null)
    string match -qr '^[1-9][0-9]*$' -- "$n"; or return 1
    set -l count (count $words)
    for i in (seq 2 $count)
        if test "$words[$i]" = --
            set n (math $n - 1)
            if test $n -eq 0
                if test $i -lt $count
                    printf '%%s\n' $words[(math $i + 1)..-1]
                end
                return 0
            end
        end
    end
    return 1
end

# __%[1]s_complete_command completes the command line of the command's
# words (quoted again) and the token at the cursor (as typed).
function __%[1]s_complete_command
    set -l words (string escape -- (__%[1]s_command_words))
    set -l cur (commandline -ct)
    complete -C (string join ' ' -- $words "$cur")
end

complete -c %[1]s -n '__%[1]s_command_words >/dev/null' -f -a '(__%[1]s_complete_command)'
`
