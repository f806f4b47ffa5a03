#!/usr/bin/env bash
# The project's test command: starts the engines the tests need (installing
# what is missing), vets the code, runs every test with the race detector,
# the bench smoke run, the Python client's tests and the default tier of
# the fault suites, then stops the engines.
#
# Every engine must start: if one cannot be installed or started, this stops
# at once, naming it (with its log, from scripts/engines.sh). And every test
# must have its engine: LEASEHOLD_REQUIRE_ENGINES=1 makes a test that would
# skip for a missing engine fail instead (testrig/enginetest).
#
# Every stage runs even when an earlier one failed, so that one failure does
# not hide the rest of the report; the script ends with a table of the
# stages (status and seconds) and exits non-zero if any failed.
#
# LEASEHOLD_STAGES="vet race" runs only the named stages (mod, vet, race,
# bench, python, verify, and engines, which starts alone; names separated by
# spaces, tabs or newlines; unset, empty or blank: all of them); the engines
# start whenever a named stage needs them. An unknown name is a usage error
# (64). The table gives each stage's wall-clock and CPU seconds (its
# processes' user + system time).
#
# SIGINT or SIGTERM (to this script alone or to its process group) stops the
# running stage's whole process tree, stops the engines, prints the table
# with the stage marked interrupted, and exits 130 or 143 (129 for SIGHUP,
# to either). A signal once the
# last stage has ended (while the engines stop and the table is printed)
# is ignored: the run ends with its stages' status.
#
# Usage: scripts/test.sh, with no arguments (-h or --help prints this; any
# other argument is a usage error, 64). LEASEHOLD_ENGINES_DIR: where the
# engines' state is kept (default .engines; see scripts/engines.sh --help).
# Exits 0 when every stage passed, 1 when one failed, 64 on a usage error,
# 75 when another test command is using the engines' directory (nothing is
# run or stopped), 130, 143 or 129 when interrupted (SIGINT, SIGTERM, SIGHUP).
set -uo pipefail
# Started in the background of a non-interactive shell (a CI step's
# "scripts/test.sh &"), this script has SIGINT ignored, and bash cannot trap
# a signal ignored on entry; yet its wait still ends on SIGINT: the run
# exited 130 with an empty table and its stage left running (the red team
# of test.sh's signals, 2026-12-06). Run again with SIGINT at its default,
# so that the trap below handles it (env --default-signal: coreutils 8.31).
if [ -n "$(trap -p INT)" ] && env --default-signal=INT true 2>/dev/null; then
	exec env --default-signal=INT "$BASH" "$0" "$@"
fi
if [ $# -eq 1 ] && { [ "$1" = -h ] || [ "$1" = --help ]; }; then
	sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit 0
elif [ $# -gt 0 ]; then
	echo "test.sh: takes no arguments (got '$1'): LEASEHOLD_STAGES names the stages; see --help" >&2
	exit 64
fi
# shellcheck source=lib/proc.sh
. "$(dirname "$0")/lib/proc.sh"
# shellcheck source=lib/order.sh
. "$(dirname "$0")/lib/order.sh"
# shellcheck source=lib/verifyp.sh
. "$(dirname "$0")/lib/verifyp.sh"
abs_tmpdir # before the cd: a relative TMPDIR is the caller's
cd "$(dirname "$0")/.."

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
all_stages="mod vet race bench python verify"
# Split on any whitespace, without pathname expansion ('*' is a name).
read -r -d '' -a named < <(printf '%s\0' "${LEASEHOLD_STAGES:-}" | tr '\t\n\r\v\f' '     ')
if [ ${#named[@]} -eq 0 ]; then
	want=" $all_stages "
else
	want=" ${named[*]} "
fi
for s in "${named[@]}"; do
	case " $all_stages engines " in
	*" $s "*) ;;
	*)
		echo "test.sh: unknown stage '$s' in LEASEHOLD_STAGES (the stages: $all_stages, engines; separated by spaces)" >&2
		exit 64
		;;
	esac
done
# The verify stage's LEASEHOLD_VERIFY_P, before the first stage, not
# after 25 minutes of them (a red team of 7c73f10).
case "$want" in *" verify "*) verify_p_ok test.sh || exit 64 ;; esac
printf -v began '%(%s)T' -1
summary=()
failed_stages=()
# The stages' TMPDIR, removed with the logs at the end (report): what a
# stage stopped by a signal leaves there (a suite's test directories, go's
# build directories, verify.sh's own) goes with it (the red team of
# 2026-12-06: the verify stage, stopped, left its report file). Both are
# removed if the run ends before its EXIT trap below is set.
runtmp= logs=
trap 'rm -rf "$logs" "$runtmp"' EXIT
own_tmpdir runtmp lht test.sh
own_tmpdir logs lhl test.sh
chmod 700 "$logs"
export TMPDIR=$runtmp
failed=0
# Made by the race stage once it has compiled the fault suites (race).
export LEASEHOLD_VERIFY_WARM=$runtmp/verify-warm

# read_status VAR FILE: sets VAR to the status written in FILE, if it
# holds one (with a builtin; see stage).
read_status() {
	local _s
	{ read -r _s <"$2"; } 2>/dev/null && [ -n "$_s" ] && printf -v "$1" '%s' "$_s"
	return 0
}

# stage NAME COMMAND...: runs COMMAND (if NAME is wanted), timing it and
# noting its status; never stops the script.
stage() {
	local name=$1 t0 st
	shift
	case "$want" in *" $name "*) ;; *) return 0 ;; esac
	# Running from here: a signal before its process starts still gets the
	# stage's INTERRUPTED row (the red team of 2026-12-06: 1 in 30 such
	# signals left an empty table).
	running=$name stage_ended= stage_mark=
	echo "== [$name] $*"
	# The row's figures are read with builtins, not in subshells: a
	# subshell does not keep this script's traps, and a signal to the
	# process group as the stage ended killed it, leaving a row of
	# "-1796563980 s" or none (the red team of test.sh's signals,
	# 2026-12-06: 29 of 210 group signals; TestTestShSignalAfterLastStage).
	printf -v t0 '%(%s)T' -1
	local c0
	cpu_now
	c0=$CPU_NOW
	if [ "$name" = engines ]; then
		"$@" # in this shell: it exports the engines' variables
		st=$?
	else
		# In the background and waited for, so that a signal to this
		# script runs its trap at once, which stops the stage's tree.
		# Its output is also kept, to be digested at the end (failures).
		# Its status is also written to a file: a signal as the stage
		# ends (deferred) makes wait return 128+n, not the stage's status.
		running=$name
		new_mark stage_mark "$name"
		# Its output goes through a tee that is this shell's child, and
		# that is waited for once the stage ends: a tee that was the
		# stage's own could run behind under load, and its log was read
		# empty at the end (no "why failed"), its last lines printed after
		# the table, or its file opened once the logs were removed (the
		# red team of 4be848e: 2 runs in 11).
		exec {tee_fd}> >(tee "$logs/$name")
		tee_pid=$! tee_stage=$name
		{
			add_mark "$stage_mark"
			"$@"
			st=$?
			echo "$st" >"$logs/$name.status"
			exit "$st"
		} >&"$tee_fd" 2>&1 {tee_fd}>&- &
		stage_pid=$!
		exec {tee_fd}>&-
		wait "$stage_pid"
		st=$?
		stage_ended=1
		[ -z "$deferred" ] || read_status st "$logs/$name.status"
		stage_pid=
	fi
	local now
	printf -v now '%(%s)T' -1
	local secs=$((now - t0))
	cpu_now
	local cpu=$((CPU_NOW - c0))
	wait_tee # not in the stage's time
	# Ended by a signal to the group: interrupted, not failed (cut_short;
	# the engines stage has had its own check).
	cut_short "$st"
	local row
	if [ $st -eq 0 ]; then
		printf -v row '%-8s ok      %5d s  (cpu %d s)' "$name" "$secs" "$cpu"
		summary+=("$row")
	else
		printf -v row '%-8s FAILED  %5d s  (cpu %d s, exit %d)' "$name" "$secs" "$cpu" "$st"
		summary+=("$row")
		failed_stages+=("$name")
		failed=1
	fi
	# The last stage's row is in the table: from here a signal is ignored
	# (interrupted). Set before running is cleared: a signal between the
	# two found neither, and ended a run whose stages had passed with 129
	# (CI run 91: SIGHUP as the engines stage's exit line was printed).
	[ "$name" != "$last_stage" ] || stages_over=1
	echo "== [$name] exit $st after $secs s (cpu $cpu s)"
	running=
	# A signal that came while the row was being written (the stage's
	# processes had ended) is acted on now, with the row in the table.
	if [ -n "$deferred" ]; then
		# shellcheck disable=SC2086 # code and signal name
		interrupted $deferred
	fi
	return 0
}

# wait_tee: waits for the running stage's tee to write its last lines and
# end, at most 5 s: a process the stage left behind may hold its output
# open; then it says so and goes on (the re-check of fd51068: 600 rounds of
# 0.1 s took up to 138 s under load, said nothing, counted in the stage's
# time and held a Ctrl-C back).
wait_tee() {
	local t0 now
	[ -n "$tee_pid" ] || return 0
	printf -v t0 '%(%s)T' -1
	while ! ended "$tee_pid"; do
		printf -v now '%(%s)T' -1
		if [ $((now - t0)) -ge 5 ]; then
			echo "test.sh: [$tee_stage] left a process holding its output open: not waiting for it (its last lines may come later)" >&2
			tee_pid=
			return 0
		fi
		sleep 0.1
	done
	wait "$tee_pid" 2>/dev/null
	tee_pid=
}

# cpu_now sets CPU_NOW to the user + system CPU seconds this script's
# waited-for children have used so far: fields 16 and 17 (cutime, cstime,
# in clock ticks) of this shell's /proc/PID/stat.
ticks=$(getconf CLK_TCK 2>/dev/null || echo 100)
cpu_now() {
	local stat rest
	CPU_NOW=0
	read -r stat 2>/dev/null </proc/$$/stat || return 0 # a builtin: see stage
	rest=${stat##*) } # after the command name, which may hold spaces
	read -r -a f <<<"$rest"
	# rest starts at field 3: cutime is field 16, cstime field 17.
	CPU_NOW=$(((f[13] + f[14]) / ticks))
}

# ended PID: process PID has exited (a zombie, or gone).
ended() {
	local st
	read -r st 2>/dev/null <"/proc/$1/stat" || return 0
	st=${st##*) }
	[ "${st:0:1}" = Z ]
}

stage_pid= running= stage_ended= deferred= stages_over= stage_mark= tee_pid= tee_stage=
# The last stage this run runs (engines runs when a later stage needs it).
last_stage=
for s in mod engines vet race bench python verify; do
	case "$want" in *" $s "*) last_stage=$s ;; esac
done
interrupted() {
	local code=$1 sig=$2
	# The last stage has ended: the engines' stop and the table are all
	# that is left, and the run ends with its stages' status.
	[ -z "$stages_over" ] || return 0
	# A stage whose process has ended (not yet reaped, or its row not yet
	# written): the row first, with its status (stage acts on the signal
	# then).
	if [ -n "$running" ] && { [ -n "$stage_ended" ] || { [ -n "$stage_pid" ] && ended "$stage_pid"; }; }; then
		deferred="$code $sig"
		return 0
	fi
	# Ignored from here on, by this script and what the cleanup runs: a
	# second signal must not skip the table or stopping the engines.
	trap '' INT TERM HUP
	if [ -n "$running" ]; then
		[ -z "$stage_pid" ] || stop_tree "$stage_pid"
		# What a signal to the group left with no parent, and what the
		# stage's processes started as they ended (lib/proc.sh, Marks).
		[ -z "$stage_mark" ] || stop_marked "$stage_mark" "$runtmp"
		summary+=("$(printf '%-8s INTERRUPTED by SIG%s' "$running" "$sig")")
	fi
	echo "test.sh: interrupted (SIG$sig)" >&2
	exit "$code"
}
# cut_short STATUS: after the wait for the running stage's process, with
# STATUS the stage's. A signal deferred as that process ended (interrupted,
# above) was taken for one that came after the stage had ended on its own:
# the row got the stage's status. But a signal to the process group (Ctrl-C,
# a CI runner's stop) reaches the stage's processes too, and they may die of
# it before this script's trap runs: the stage's shell, killed (SIGTERM,
# SIGHUP) before it wrote its status, or its command, dead of SIGINT (which
# the shell ignores), gave 143, 129 or 130, the row said FAILED, and, the
# stages being over, the run exited 1 (the red team of 2026-12-06
# (second): 1 Ctrl-C in 6 with the mod stage; a SIGTERM to the group, 1 in
# 2). Such a stage was ended by the signal: it is interrupted, and the run
# stops with the signal's code. A stage that ended with any other status
# (its own, the signal after it) keeps its row.
cut_short() {
	[ -n "$deferred" ] || return 0
	case $1 in
	129 | 130 | 143) ;;
	*) [ ! -s "$logs/$running.status" ] || return 0 ;;
	esac
	stage_ended=
	# shellcheck disable=SC2086 # code and signal name
	interrupted $deferred
}

# failures: what each failed stage said about why, gathered from its kept
# output, so that the end of the report names the failing tests even when
# a stage's output is long (a test binary's timeout prints every
# goroutine): go test's FAIL lines, the first lines a failing test logged,
# and a timeout's list of the tests still running.
failures() {
	local name f
	for name in "${failed_stages[@]}"; do
		f=$logs/$name
		[ -s "$f" ] || continue
		echo
		echo "== why [$name] failed (its lines naming failures; the whole output is above)"
		awk '
			/^panic: test timed out/ { print; timeout = 1; n++; next }
			timeout && /^\trunning tests:/ { print; next }
			timeout && /^\t\t/ { print; next }
			{ timeout = 0 }
			/^(--- FAIL|FAIL|panic:)/ { print; body = 6; n++; next }
			body > 0 && /^ +/ { print; body--; next }
			{ body = 0 }
			# nothing go test would print: the stage'"'"'s last lines
			{ tail[NR % 20] = $0 }
			END { if (!n) for (i = NR - 19; i <= NR; i++) if (i > 0) print tail[i % 20] }
		' "$f" | head -n 80
	done
}

# finish [stop]: the end of every run, from the EXIT trap: stops the
# engines (with "stop") and prints the table. A signal from here on is
# ignored, by this script and by what it runs (engines.sh stop inherits
# that): the stages are over, and a signal that cut the stop short left an
# engine running and no table (the red team of 2026-12-06). The run then
# exits with its stages' status.
finish() {
	trap '' INT TERM HUP
	wait_tee # a stage stopped by a signal: its last lines before the table
	[ -z "${1:-}" ] || scripts/engines.sh stop
	report
}

report() {
	[ ${#failed_stages[@]} -eq 0 ] || failures
	echo
	local gv
	read -r _ _ gv _ <<<"$gover"
	echo "== stages ($(($(date +%s) - began)) s in all, ${gv:-go version unknown}, $(nproc) cores)"
	printf '%s\n' "${summary[@]}"
	rm -rf "$logs" "$runtmp"
}

race() {
	local pkgs all mod
	all=$(go list ./... | grep -v '/testrig/verify') || return 1
	mod=$(main_module) || return 1
	# The longest packages first, then the others as go lists them: go
	# test starts the runs in the order given (lib/order.sh).
	pkgs=$(order_packages scripts/lib/race-order.txt "$mod" <<<"$all") || return 1
	if [ "$(grep -c . <<<"$pkgs")" != "$(grep -c . <<<"$all")" ]; then
		echo "test.sh: race: the ordered list has $(grep -c . <<<"$pkgs") packages, go list $(grep -c . <<<"$all")" >&2
		return 1
	fi
	# The slowest package takes about 4.5 minutes on a quiet 2-core
	# machine: 20 minutes leave room for a loaded one and bound what a
	# hung test costs (its binary then prints every goroutine, and the
	# report's end names the tests that were running: failures).
	# Three packages at a time, not go's default of one per core: the
	# stage spends most of its time waiting on TTLs, engines and child
	# processes (beside a busy loop, two at a time used 859 s of CPU in
	# 1,300 s; three, 778 s in 1,082 s), and a third package overlaps
	# those waits. Not four (CI run 80: 695 s in 847 s, but two tests
	# failed under that load, docs/testing.md).
	# While the race tests run (they mostly wait: beside a busy loop, 887 s
	# of CPU in 1,193 s on 2 cores, CI run 106), compile the fault suites'
	# packages for the verify stage, at nice 10 so that the tests come
	# first: verify.sh's own build of their test binaries then only links
	# (it took about 170 s on a cold cache before the first suite ran).
	# Waited for before the stage ends, so that it stays in this stage.
	local warm= warmdir st=0
	case "$want" in
	*" verify "*)
		warmdir=$(mktemp -d) || return 1
		nice -n 10 go test -c -p 2 -o "$warmdir/" ./testrig/verify/... >/dev/null 2>&1 &
		warm=$!
		;;
	esac
	# shellcheck disable=SC2086 # one word per package
	go test -race -count=1 -p 3 -timeout 20m $pkgs || st=$?
	if [ -n "$warm" ]; then
		wait "$warm" # its failures are the verify stage's to report
		rm -rf "$warmdir"
		: >"$LEASEHOLD_VERIFY_WARM" # verify.sh: no build of its own first
	fi
	return $st
}

# Every benchmark suite of the bench module (its own go.mod) once with tiny
# counts (docs/benchmarks.md), so that none can rot: a suite that cannot run
# an implementation or its reference fails; timings never do. A change to
# the main go.mod can leave bench/go.mod behind: cd bench && go mod tidy.
# Its three steps all run, so that a failing test does not hide the smoke
# run; the stage fails if any did.
bench_smoke() {
	(
		cd bench || exit 1
		st=0
		go vet ./... || st=1
		go test -count=1 ./... || st=1
		go run . --smoke all >/dev/null || st=1
		exit $st
	)
}

engines() {
	trap 'finish stop' EXIT
	local exports failedwhat st
	# Not eval "$(scripts/engines.sh start)": eval would go on after a failure.
	# In the background and waited for, as the other stages: a signal then
	# stops the start at once and the table marks the stage interrupted.
	running=engines
	# This run claims the engines' directory (scripts/engines.sh --help): a
	# second test command on it is refused (75) instead of stopping these.
	export LEASEHOLD_ENGINES_CLAIM=$$
	{
		scripts/engines.sh start
		st=$?
		echo "$st" >"$logs/engines.status"
		exit "$st"
	} >"$logs/engines.env" &
	stage_pid=$!
	wait "$stage_pid"
	st=$?
	stage_ended=1
	[ -z "$deferred" ] || read_status st "$logs/engines.status"
	stage_pid=
	cut_short "$st"
	exports=$(cat "$logs/engines.env")
	if [ $st -eq 75 ]; then
		trap finish EXIT # the engines are the other command's
		echo "test.sh: FAILED: the engines' directory is in use by another test command (above)" >&2
		return 75
	elif [ $st -ne 0 ]; then
		failedwhat=$(cat "${LEASEHOLD_ENGINES_DIR:-.engines}/failed" 2>/dev/null || echo "see above")
		echo "test.sh: FAILED: the test engines did not start: $failedwhat" >&2
		return 1
	fi
	eval "$exports"
	export LEASEHOLD_REQUIRE_ENGINES=1
}

# The table's trap first, then the signals': a signal from here on ends
# the run with the table (between the two, by the signal's default action,
# which runs the EXIT trap); a signal to the script as go version ran
# ended it with no table (the third red team of 2026-12-06). go version
# ignores the signals: a signal to the group killed it and left the
# heading empty. It runs once (the table names the version too): a slow
# one (a toolchain's download) held a Ctrl-C for twice its time.
gover=
trap finish EXIT
trap 'interrupted 130 INT' INT
trap 'interrupted 143 TERM' TERM
trap 'interrupted 129 HUP' HUP # a closed terminal or a dropped ssh
# One command, so that a signal held during go version finds the heading
# printed.
echo "== ${gover:=$(
	trap '' INT TERM HUP
	go version
)}"
stage mod go mod download
case "$want" in
*" race "* | *" bench "* | *" python "* | *" verify "* | *" engines "*)
	want="$want engines "
	stage engines engines
	if [ $failed -ne 0 ]; then
		# Nothing that needs an engine can pass without it. Another test
		# command on the engines' directory: 75, try again later.
		case "${summary[-1]}" in *"exit 75)"*) exit 75 ;; esac
		exit 1
	fi
	;;
esac
# With -race, vet compiles every dependency as the race stage needs it, and
# the race stage finds them in the build cache (on a cold cache that saves
# the minutes of compiling them twice). No file of the module depends on
# the race build tag, so vet sees the same code either way.
stage vet go vet -race ./...
stage race race
stage bench bench_smoke
# The Python client (clients/python) against a real server built from this
# checkout, with Debian's /usr/bin/python3 (see clients/python/run_tests.sh).
stage python clients/python/run_tests.sh
# The fault suites (docs/verification.md) run their workers as processes and
# time faults against lease TTLs: they run without the race detector, three
# packages at a time, and end with the verification report. Without the
# 5 s fuzzing of each target: the race stage runs every fuzz target's seed
# corpus, and the fuzzing's instrumented build of a third copy of the
# dependencies cost about 4.5 minutes of CPU (scripts/fuzz.sh, or
# scripts/verify.sh alone, fuzzes).
stage verify env LEASEHOLD_VERIFY_FUZZ=0 scripts/verify.sh default
exit $failed
