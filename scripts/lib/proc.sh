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
