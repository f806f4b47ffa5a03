#!/usr/bin/env bash
# The flake hunt: runs tests many times on a deliberately loaded machine
# and reports every failure, package by package, with the failing tests'
# names, so that a flaky test is found here rather than in CI.
#
#   scripts/flakes.sh                     # every package but the fault suites, -count 5, -race
#   scripts/flakes.sh -count 10 ./cmd/leasehold/cli/ ./cmd/leasehold/
#   scripts/flakes.sh -load 0 -norace     # no extra load, no race detector
#
# Options: -count N (default 5) runs of each test; -load K (default 2 per
# core) busy loops running beside the tests for the whole hunt; -norace
# leaves out the race detector (CI uses it; the hunt is faster without);
# -timeout D per package (default 60m; a Go duration with each unit once). Packages default to what
# scripts/test.sh runs under -race (every package but testrig/verify).
#
# Starts test engines of its own unless they are already running
# (LEASEHOLD_TEST_PG_BIN set, as test.sh and verify.sh export it), in its
# output directory, so that two hunts in one checkout do not stop each
# other's engines; LEASEHOLD_REQUIRE_ENGINES=1. Each package's output is
# kept in $LEASEHOLD_FLAKES_DIR (default a new temporary directory). Exits
# non-zero if any run of any test failed, 64 on a bad option or package
# (options go before the packages) or an output directory that cannot be
# made or written (LEASEHOLD_FLAKES_DIR, or TMPDIR for the default), 75
# when another test command is using the engines' directory it was given
# (LEASEHOLD_ENGINES_DIR; scripts/engines.sh --help), and 130 after Ctrl-C (SIGINT), 143 after SIGTERM or 129 after SIGHUP, once the running test and
# the busy loops are stopped. Killed with SIGKILL (no trap runs), a watchdog
# stops the running test and the engines it started, and the busy loops
# end by themselves, within a few seconds.
set -uo pipefail
caller=$PWD # a relative LEASEHOLD_FLAKES_DIR is the caller's, not the checkout's
# shellcheck source=lib/proc.sh
. "$(dirname "$0")/lib/proc.sh"
abs_tmpdir # before the cd: a relative TMPDIR is the caller's
cd "$(dirname "$0")/.."

usage() {
	echo "flakes.sh: $*" >&2
	exit 64
}
count=5 load=$((2 * $(nproc))) race=-race timeout=60m
while [ $# -gt 0 ]; do
	case "$1" in
	-count | -load | -timeout) [ $# -ge 2 ] || usage "$1 needs a value (see --help)" ;;
	esac
	case "$1" in
	-count) count=$2; shift 2 ;;
	-load) load=$2; shift 2 ;;
	-norace) race=; shift ;;
	-timeout) timeout=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) usage "unknown option $1 (see --help)" ;;
	*) break ;;
	esac
done
# Decimal, as written (go test reads 010 as octal 8): leading zeros are
# dropped here; at most 6 digits, so that the shell's arithmetic holds.
[[ $count =~ ^[0-9]{1,6}$ ]] && [ $((10#$count)) -ge 1 ] || usage "-count takes a whole number from 1 to 999999 (got '$count')"
count=$((10#$count))
[[ $load =~ ^[0-9]{1,4}$ ]] || usage "-load takes a whole number up to 9999 (got '$load')"
load=$((10#$load))
# A Go duration, each unit at most once with at most 6 digits: within
# go's range (999999h three times passed a check of the parts alone, and go
# test refused it for every package: reported as failures, not as a usage
# error; the red team of 9d12303).
duration_ok() {
	local rest=$1 seen=" " unit
	[ "$rest" = 0 ] && return 0
	[ -n "$rest" ] || return 1
	while [ -n "$rest" ]; do
		[[ $rest =~ ^[0-9]{1,6}(\.[0-9]+)?(ns|us|µs|ms|s|m|h)(.*)$ ]] || return 1
		unit=${BASH_REMATCH[2]} rest=${BASH_REMATCH[3]}
		[ "$unit" = µs ] && unit=us
		case "$seen" in *" $unit "*) return 1 ;; esac
		seen="$seen$unit "
	done
}
duration_ok "$timeout" || usage "-timeout takes a Go duration such as 60m or 1h30m (each unit once, at most 6 digits a unit), or 0 for none (got '$timeout')"
for a in "$@"; do
	case "$a" in
	-*) usage "option $a after the packages: options go first (see --help)" ;;
	'') usage "an empty package name (go list takes it for the module's root package)" ;;
	esac
done

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
# The output directory must exist and take files: never an empty path.
made_out=
# unmake_out: a hunt refused before it ran removes the directories it made
# for its output, from the deepest, and only those that are empty: another
# hunt given the same directory meanwhile may be writing there (rm -rf
# removed its logs and engines' directory: the red team of 4be848e).
unmake_out() {
	[ -n "$made_out" ] || return 0
	[ -z "${priv:-}" ] || rm -f -- "$priv".*
	local d=$out
	while :; do
		if [ -e "$d" ]; then rmdir -- "$d" 2>/dev/null || break; fi
		[ "$d" != "$made_out" ] || break
		d=${d%/*}
	done
	made_out=
}
if [ -n "${LEASEHOLD_FLAKES_DIR:-}" ]; then
	out=$LEASEHOLD_FLAKES_DIR
	[[ $out == /* ]] || out=$caller/$out
	# Without "..": mkdir -p makes a/../b, the first missing one below
	# would be a, and b would be left (the red team of a767dc1).
	# A newline at a name's end is kept ($(...) alone drops it).
	out=$(realpath -m -- "$out" && echo .)
	out=${out%.} out=${out%$'\n'}
	# The first directory of its path that mkdir makes: a hunt refused
	# before it ran (64 for its packages, 75) removes what it made. The
	# path is absolute: its parent is what precedes its last /.
	if [ ! -e "$out" ]; then
		made_out=$out
		while parent=${made_out%/*} && [ -n "$parent" ] && [ ! -e "$parent" ]; do made_out=$parent; done
	fi
	# Room for the logs' names below it (a path near 4,096 bytes passed
	# the check, then no log could be written; over it, mkdir -p made
	# every directory and they were left: the red teams of 4be848e and
	# fd51068).
	out_len=$(LC_ALL=C && echo "${#out}") # bytes, not characters
	[ "$out_len" -le 3900 ] || usage "the output directory's path is $out_len bytes long (LEASEHOLD_FLAKES_DIR): at most 3900, to leave room for the logs' names"
	# Its mark of presence ($priv.here, kept until the end) is its write
	# check too: a second hunt refused meanwhile leaves the directory to
	# it. Made again should that hunt have removed it just then.
	priv=$out/.flakes.$$
	for try in 1 2 3 0; do
		mkdir -p -- "$out" 2>/dev/null && { : >"$priv.here"; } 2>/dev/null && break
		if [ $try = 0 ]; then
			unmake_out # what mkdir -p made before it failed (the red team of 4be848e)
			usage "cannot create or write the output directory '$out' (LEASEHOLD_FLAKES_DIR): make it a writable directory"
		fi
	done
elif ! out=$(mktemp -d -t leasehold-flakes.XXXXXX 2>/dev/null) || [ -z "$out" ]; then
	usage "cannot create a temporary directory in ${TMPDIR:-/tmp} (TMPDIR): make it an existing, writable directory, or set LEASEHOLD_FLAKES_DIR"
else
	made_out=$out
	priv=$out/.flakes.$$
fi

# This run's own files in the output directory (a second hunt given the
# same directory must not take or remove them): $priv.here (above),
# .running, .tick, .golist, .env; removed at the end.
loops=()
gopid=
watcher=
# The watchdog is stopped last: a SIGKILL during the cleanup (as a runner's
# SIGTERM, then SIGKILL a second later) leaves the rest to it.
cleanup() {
	[ ${#loops[@]} -gt 0 ] && kill "${loops[@]}" 2>/dev/null
	loops=()
	if [ -n "$gopid" ]; then
		stop_tree "$gopid"
		gopid=
	fi
	if [ -n "${started_engines:-}" ]; then
		started_engines=
		scripts/engines.sh stop
	fi
	[ -z "$watcher" ] || kill "$watcher" 2>/dev/null
	watcher=
	[ -z "${priv:-}" ] || rm -f "$priv".*
}
trap cleanup EXIT
# A second signal during the cleanup is ignored (said once, cleaned once).
trap 'trap "" INT TERM HUP; echo "flakes.sh: interrupted" >&2; cleanup; exit 130' INT
trap 'trap "" INT TERM HUP; echo "flakes.sh: terminated" >&2; cleanup; exit 143' TERM
trap 'trap "" INT TERM HUP; echo "flakes.sh: hung up (SIGHUP)" >&2; cleanup; exit 129' HUP

# alive PID START: process PID runs and is the one that started at START
# (field 22 of its stat: not a later process given the same pid).
alive() {
	local s f
	read -r s 2>/dev/null <"/proc/$1/stat" || return 1
	s=${s##*) } # after the command name, which may hold spaces
	read -r -a f <<<"$s"
	[ "${f[0]}" != Z ] && [ "${f[19]}" = "$2" ]
}

# running PID: notes the test command being waited for (its pid and start)
# in $priv.running, for the watchdog.
running() {
	local s f
	read -r s 2>/dev/null <"/proc/$1/stat" || s=
	s=${s##*) }
	read -r -a f <<<"$s"
	echo "$1 ${f[19]:-}" >"$priv.running"
}

# The watchdog: a SIGKILL to this script alone runs no trap, and left the
# busy loops spinning and the running test going for up to its -timeout
# (the red team of 2026-12-06). It checks once a second that the script
# runs; once it is gone, it stops the test's whole tree and the engines
# the hunt started (their claim, this script's, is stale by then). The
# busy loops end by themselves (they check the same). It has no child
# while it waits (read -t on a FIFO only it holds), so that stopping it
# leaves nothing behind.
me=$$
read -r mestat <"/proc/$me/stat"
mestat=${mestat##*) }
read -r -a mestat <<<"$mestat"
mestart=${mestat[19]}
watchdog() {
	trap - INT TERM HUP EXIT
	exec 9<>"$priv.tick" && rm -f "$priv.tick"
	while alive "$me" "$mestart"; do
		read -r -t 1 -u 9 _
	done
	local pid start
	if read -r pid start 2>/dev/null <"$priv.running" && [ -n "$start" ] && alive "$pid" "$start"; then
		stop_tree "$pid"
	fi
	if [ -n "${started_engines:-}" ]; then
		# The hunt's claim names a process gone by now: stale, not ours.
		LEASEHOLD_ENGINES_CLAIM= scripts/engines.sh stop >/dev/null 2>&1
	fi
	rm -f "$priv".*
}

# The packages first: a bad one is a usage error before any engine starts.
# A go that cannot list (a bad GOFLAGS) leaves no output directory made.
if ! module=$(go list -m); then
	unmake_out
	exit 1
fi
if [ $# -gt 0 ]; then
	if ! list=$(go list "$@" 2>"$priv.golist") || grep -q "matched no packages" "$priv.golist"; then
		cat "$priv.golist" >&2
		rm -f "$priv.golist"
		unmake_out
		echo "flakes.sh: go list could not find every package named (see above)" >&2
		exit 64
	fi
	cat "$priv.golist" >&2
	rm -f "$priv.golist"
else
	if ! list=$(go list ./... | grep -v '/testrig/verify'); then
		unmake_out
		exit 1
	fi
fi
mapfile -t pkgs <<<"$list"

if [ -z "${LEASEHOLD_TEST_PG_BIN:-}" ]; then
	started_engines=1
	# Engines of its own: another run's "engines.sh start" would stop the
	# engines of a shared state directory.
	export LEASEHOLD_ENGINES_DIR=${LEASEHOLD_ENGINES_DIR:-$out/engines}
	export LEASEHOLD_ENGINES_CLAIM=$$ # one test command per directory
	# In the background and waited for: a signal meanwhile runs the trap
	# at once, which stops the start's tree and then the engines (waiting
	# in the foreground deferred the trap until every engine had started).
	st=0
	rm -f "$priv.tick" # one left by a killed run with this pid
	mkfifo "$priv.tick" && { watchdog & watcher=$!; }
	scripts/engines.sh start >"$priv.env" &
	gopid=$!
	running "$gopid"
	wait "$gopid" || st=$?
	gopid=
	exports=$(cat "$priv.env")
	if [ $st -eq 75 ]; then
		started_engines= # the engines are the other command's
		rm -f "$priv".*
		unmake_out # nothing ran: leave nothing behind
		echo "flakes.sh: FAILED: the engines' directory is in use by another test command (above)" >&2
		exit 75
	elif [ $st -ne 0 ]; then
		echo "flakes.sh: FAILED: the test engines did not start" >&2
		exit 1
	fi
	eval "$exports"
fi
export LEASEHOLD_REQUIRE_ENGINES=1
if [ -z "$watcher" ] && rm -f "$priv.tick" && mkfifo "$priv.tick"; then
	watchdog &
	watcher=$!
fi


for ((i = 0; i < load; i++)); do
	# Each ends by itself once this script is gone (a SIGKILL runs no trap).
	(while alive "$me" "$mestart"; do for ((j = 0; j < 20000; j++)); do :; done; done) &
	loops+=($!)
done

echo "== flake hunt: ${#pkgs[@]} packages, -count $count ${race:-(no -race)}, $load busy loops on $(nproc) cores; output in $out"
began=$(date +%s)
failed=0
printf '%-58s %6s %6s  %s\n' package secs fails "failing tests" >"$out/summary"
for p in "${pkgs[@]}"; do
	f="$out/$(echo "$p" | tr / _).log"
	t0=$(date +%s)
	# In the background and waited for, so that SIGINT or SIGTERM runs
	# the trap at once (it kills this test and ends the hunt).
	# shellcheck disable=SC2086 # race is one word or none
	go test $race -count="$count" -timeout "$timeout" "$p" >"$f" 2>&1 &
	gopid=$!
	running "$gopid"
	wait "$gopid"
	st=$?
	gopid=
	tests=$(grep -E '^\s*--- FAIL' "$f" | awk '{print $3}' | sort | uniq -c | awk '{printf "%s×%s ", $2, $1}')
	n=$(grep -cE '^--- FAIL' "$f")
	if [ $st -ne 0 ]; then
		failed=1
		[ "$n" -eq 0 ] && tests="exit $st (see $f)"
		# A panic (a test's, or -timeout's) ends the test binary: the
		# package's later runs were not made.
		if grep -qE '^panic: ' "$f"; then
			tests="${tests% } (a panic ended the runs early: $(grep -m1 -E '^panic: ' "$f" | cut -c1-80))"
		fi
	fi
	short=.${p#"$module"} # ./internal/editdist, or . for the module's root
	printf '%-58s %6d %6d  %s\n' "$short" $(($(date +%s) - t0)) "$n" "$tests" | tee -a "$out/summary"
done
echo "== flake hunt done in $(($(date +%s) - began)) s: $([ $failed -eq 0 ] && echo "no failure" || echo "FAILURES above")"
exit $failed
