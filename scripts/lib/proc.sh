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
# left behind with no parent.
stop_tree() {
	local pids p
	pids=$(tree_pids "$1")
	for p in $pids; do kill -TERM "$p" 2>/dev/null; done
	for p in $pids; do kill -CONT "$p" 2>/dev/null; done
	sleep 2
	for p in $pids; do
		for p in $(tree_pids "$p"); do kill -KILL "$p" 2>/dev/null; done
	done
}

# need_tmpdir WHO: exits 64, saying so, when no file can be made in TMPDIR
# (a missing or unwritable directory, or a file).
need_tmpdir() {
	local probe
	if ! probe=$(mktemp 2>/dev/null) || [ -z "$probe" ]; then
		echo "$1: cannot create a temporary file in ${TMPDIR:-/tmp} (TMPDIR): make it an existing, writable directory" >&2
		exit 64
	fi
	rm -f "$probe"
}

# run_tmpdir PREFIX: makes a directory in TMPDIR (PREFIX.XXXXXX) and prints
# it, for a script to export as TMPDIR of everything it runs and remove
# whole when it ends: what a stopped test leaves (its test directories, go's
# build directories) goes with it. Mode 0755: PostgreSQL, which the tests
# run as its own user, must reach its data directories inside. A short
# name: Unix socket paths are limited to 107 bytes.
run_tmpdir() {
	local d
	d=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") && chmod 755 "$d" && echo "$d"
}
