# Process helpers shared by the test scripts (sourced, not run).

# tree_pids PID: PID and every descendant, parents first. Each is stopped
# (SIGSTOP) before its children are listed, so that none can start a child
# that escapes the list; stop_tree continues them.
tree_pids() {
	local pid=$1 child
	kill -STOP "$pid" 2>/dev/null || return 0
	echo "$pid"
	for child in $(pgrep -P "$pid"); do
		tree_pids "$child"
	done
}

# stop_tree PID: SIGTERM to the whole tree of PID (a test's processes get
# to clean up after themselves where they handle it), then SIGKILL 2 s later
# to whatever of it is left, including what was started meanwhile. None is
# left behind with no parent. A kill that finds its process gone is no
# failure: a listed process can be a child that had just ended, which its
# parent reaps meanwhile (CI run 95 of 2026-12-06: under verify.sh's set -e
# that failed kill ended the clean-up, which left the suites running).
stop_tree() {
	local pids p
	pids=$(tree_pids "$1")
	for p in $pids; do kill -TERM "$p" 2>/dev/null || :; done
	for p in $pids; do kill -CONT "$p" 2>/dev/null || :; done
	sleep 2
	for p in $pids; do
		for p in $(tree_pids "$p"); do kill -KILL "$p" 2>/dev/null || :; done
	done
	return 0
}

# stop_children: stop_tree of each process that is this script's child now
# (its parent checked again: a pid seen a moment before may be another
# process's by then).
stop_children() {
	local c
	for c in $(pgrep -P $$); do
		[ "$(ps -o ppid= -p "$c" 2>/dev/null | tr -d ' ')" = $$ ] && stop_tree "$c"
	done
	return 0 # not the last check's status: verify.sh runs with set -e
}

# run_tmpdir PREFIX: makes a directory in TMPDIR (PREFIX.XXXXXX) and prints
# it, for a script to export as TMPDIR of everything it runs and remove
# whole when it ends: what a stopped test leaves (its test directories, go's
# build directories) goes with it. Mode 0755: PostgreSQL, which the tests
# run as its own user, must reach its data directories inside. A short
# name: Unix socket paths are limited to 107 bytes.
run_tmpdir() {
	local d
	d=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX" 2>/dev/null) || return 1
	if ! chmod 755 "$d" 2>/dev/null; then
		rm -rf "$d"
		return 1
	fi
	echo "$d"
}

# own_tmpdir VAR PREFIX WHO: makes a directory with run_tmpdir and sets VAR
# to it. A signal meanwhile, before the name is known to the script's
# clean-up, is held until VAR is set, then sent again (the red team of
# 2026-12-06 left the directory 4 times in 41 signals in that moment).
# Exits 64, saying so, when no directory can be made (TMPDIR missing,
# unwritable, a file, or its chmod refused).
own_tmpdir() {
	local _held= _d
	trap '_held=TERM' TERM
	trap '_held=HUP' HUP
	trap '_held=INT' INT
	# The command substitution's subshell does not inherit those traps
	# (bash resets trapped signals there), so a signal to the whole
	# process group killed it, or mktemp or chmod, after mktemp -d had
	# made the directory and before its name was printed (the red team of
	# 2026-12-06 (second): test.sh left it 9 times in 100 group SIGTERMs,
	# verify.sh 8 in 50). The subshell ignores them before it makes
	# anything, and what it runs inherits that; one before the trap ''
	# kills it with nothing made. This shell holds its own copy, as above.
	_d=$(
		trap '' TERM HUP INT
		run_tmpdir "$2"
	) || _d=
	printf -v "$1" '%s' "$_d"
	trap - TERM HUP INT
	[ -z "$_held" ] || kill -s "$_held" $$
	if [ -z "$_d" ]; then
		echo "$3: cannot make a directory in ${TMPDIR:-/tmp} (TMPDIR): make it an existing, writable directory" >&2
		exit 64
	fi
}

# abs_tmpdir: a relative TMPDIR is made absolute from the current
# directory. Called before a script changes to the repository's root (the
# red team of 2026-12-06: TMPDIR=rel was looked for in the checkout and
# refused, and TMPDIR=. put the scripts' own directory in the checkout and
# gave the tests a relative TMPDIR, which t.TempDir cannot use).
abs_tmpdir() {
	case "${TMPDIR:-}" in
	"" | /*) ;;
	*) TMPDIR=$PWD/$TMPDIR ;;
	esac
}
