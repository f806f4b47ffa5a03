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
# process's by then). The parent is read with builtins: procps' ps sets
# handlers of its own for SIGTERM and SIGHUP, which the clean-up's trap ''
# does not reach, and a signal to the group killed it, so the check failed
# and that child was never stopped (the third red team of 2026-12-06: a
# burst of SIGTERMs to verify.sh's group left the suites running, 10 of
# 10).
stop_children() {
	local c
	for c in $(pgrep -P $$); do
		[ "$(ppid_of "$c")" != $$ ] || stop_tree "$c"
	done
	return 0 # not the last check's status: verify.sh runs with set -e
}

# ppid_of PID: prints PID's parent (field 4 of /proc/PID/stat, after the
# command name, which may hold spaces), nothing if PID is gone.
ppid_of() {
	local s
	read -r s 2>/dev/null <"/proc/$1/stat" || return 0
	s=${s##*) }
	s=${s#* }
	echo "${s%% *}"
}

# Marks. A process of a tree that dies of a signal to the group before the
# clean-up reaches it leaves its children with no parent, out of the tree's
# reach, and so does one that starts a child as it ends (the third red team
# of 2026-12-06: test.sh and verify.sh left such children running, 8 of 8
# and 20 of 20). So what a script runs also carries a mark in its
# environment, which every descendant inherits wherever it goes:
# LEASEHOLD_PROC_MARKS, a list of marks separated by ':' (verify.sh run by
# test.sh carries test.sh's stage's mark and adds its own). The script's
# own process does not show a mark it added (its environment in /proc is
# the one it started with).

# new_mark VAR NAME: sets VAR to a mark of this run of this script (NAME,
# this shell's pid and the time: letters, digits and '-').
new_mark() {
	printf -v "$1" 'lh-%s-%d-%(%s)T' "$2" $$ -1
}

# add_mark MARK: what this shell runs from now on carries MARK too.
add_mark() {
	export LEASEHOLD_PROC_MARKS="${LEASEHOLD_PROC_MARKS:+$LEASEHOLD_PROC_MARKS:}$1"
}

# marked_pids MARK [DIR]: the processes whose environment carries MARK (a
# zombie has none), and, given DIR (the script's own TMPDIR), those whose
# working directory or program is DIR or inside it. A process can lose its environment
# from /proc: redis-server writes its process title over it (the red team's
# re-check of 2026-12-06: a Redis started in a session of its own by a
# stage that then died of a group signal was left running, 6 of 6), and one
# that clears it (env -i) has none. The engines the tests start work in
# their test directories, in the script's TMPDIR, where nothing else does.
# grep runs without the marks: it would find itself.
marked_pids() {
	local f pat dir
	for f in $(env -u LEASEHOLD_PROC_MARKS grep -lzE "^LEASEHOLD_PROC_MARKS=(.*:)?$1(:.*)?\$" /proc/[0-9]*/environ 2>/dev/null); do
		f=${f#/proc/}
		echo "${f%/environ}"
	done
	[ -n "${2:-}" ] || return 0
	# The kernel shows a working directory resolved (no symlink, '//' or
	# '/./'), and so must DIR be: a TMPDIR of /tmp/ (a trailing slash) or
	# through a symlink matched nothing (the red team's second re-check of
	# 2026-12-06: a Redis left 29 of 30). Builtins only.
	dir=$(cd -P -- "$2" 2>/dev/null && pwd -P) || return 0
	# find's -lname takes a pattern: DIR's own *, ? and [ escaped.
	pat=${dir//\\/\\\\}
	pat=${pat//\*/\\*}
	pat=${pat//\?/\\?}
	pat=${pat//\[/\\[}
	# Its working directory there, or its program: a test's binaries are
	# built there (go test's, and the leasehold the end-to-end tests
	# build), and a test may start one with an environment of its own
	# (CI run 98, stopped by hand: a leasehold hold the cmd/leasehold tests
	# started without the LEASEHOLD_* variables, its parent killed).
	for f in $(find /proc -mindepth 2 -maxdepth 2 \( -name cwd -o -name exe \) \( -lname "$pat" -o -lname "$pat/*" \) 2>/dev/null); do
		f=${f#/proc/}
		f=${f%/*}
		case $f in *[!0-9]*) ;; *) echo "$f" ;; esac # not self, thread-self
	done
}

# stop_marked MARK [DIR]: SIGTERM to every process marked_pids finds
# (after stop_tree, they are the ones it could not reach), then 1 s later
# SIGKILL to those left and to what they started meanwhile, until none is
# left.
stop_marked() {
	local pids p n
	pids=$(marked_pids "$1" "${2:-}")
	[ -n "$pids" ] || return 0
	for p in $pids; do
		kill -TERM "$p" 2>/dev/null || :
		kill -CONT "$p" 2>/dev/null || :
	done
	sleep 1
	for n in 1 2 3 4 5 6 7 8 9 10; do
		pids=$(marked_pids "$1" "${2:-}")
		[ -n "$pids" ] || return 0
		for p in $pids; do kill -KILL "$p" 2>/dev/null || :; done
		sleep 0.1
	done
	return 0
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
