#!/usr/bin/env bash
# Runs the fault suites of docs/verification.md and prints their report:
# one row per suite and store (operations, faults injected, violations,
# checker result). Exits non-zero if a suite failed or a row is not a pass.
#
#   scripts/verify.sh               # default tier (part of scripts/test.sh)
#   scripts/verify.sh long          # every suite at full length (hours)
#   scripts/verify.sh long ./testrig/verify/crash/   # one package
#
# Starts the test engines unless they are already running (scripts/test.sh
# starts them first), and stops at once, naming the engine, if one does not
# start (75 when another test command is using the engines' directory:
# scripts/engines.sh --help). A suite whose engine is missing fails rather than skips unless
# LEASEHOLD_REQUIRE_ENGINES=0. Set LEASEHOLD_VERIFY_REPORT to keep the raw
# rows. scripts/test.sh sets LEASEHOLD_VERIFY_WARM to a file its race stage
# makes once it has compiled the suites: if it exists, they are not built
# first. LEASEHOLD_VERIFY_FUZZ=0 leaves out the fuzzing after the suites
# (scripts/test.sh does: its race stage runs every fuzz target's seeds);
# LEASEHOLD_VERIFY_P: suites at a time (3; 1 to 64). Unset or empty: the
# default; another value of either is a usage error (64) before anything
# runs, as are an empty tier, an argument after the tier that is not a
# package of ./testrig/verify/... (a go test flag, a typo, ./...), and a
# LEASEHOLD_VERIFY_REPORT that is not a regular file it can write or make
# (a relative one is the caller's; its name as the kernel reads it: rep/ or
# f/../rep with rep, f files are refused; one the kernel will not write, a
# name too long, an immutable or append-only file, is refused before the
# engines start).
# Naming packages runs no fuzzing. SIGINT is acted on when it reaches the
# running step too (Ctrl-C: the terminal's whole process group); to this
# script alone it is not, and the run goes on: stop it with SIGTERM.
set -euo pipefail
# shellcheck source=lib/proc.sh
. "$(dirname "$0")/lib/proc.sh"
# shellcheck source=lib/order.sh
. "$(dirname "$0")/lib/order.sh"
# shellcheck source=lib/verifyp.sh
. "$(dirname "$0")/lib/verifyp.sh"
abs_tmpdir # before the cd: a relative TMPDIR is the caller's
# So are a relative LEASEHOLD_VERIFY_WARM and LEASEHOLD_VERIFY_REPORT (the
# report's was taken from each suite's package directory: its rows were
# lost and a passing run failed; the red team of 9d12303).
# absolute NAME VAR: VAR set to NAME, made absolute from the current
# directory by text alone: the kernel resolves it when it is used, as it
# would have from here ($(realpath -m) resolved by text too: "rep/" with
# rep a file wrote rep, "f/../rep" with f a file wrote ./rep; from a
# removed directory it failed with realpath's message and exit 1: the red
# team of 4be848e). Every character is kept (a newline at its end too).
absolute() {
	case "$1" in
	/*) printf -v "$2" '%s' "$1" ;;
	*) printf -v "$2" '%s' "$PWD/$1" ;;
	esac
}
[ -z "${LEASEHOLD_VERIFY_WARM:-}" ] || absolute "$LEASEHOLD_VERIFY_WARM" LEASEHOLD_VERIFY_WARM
[ -z "${LEASEHOLD_VERIFY_REPORT:-}" ] || absolute "$LEASEHOLD_VERIFY_REPORT" LEASEHOLD_VERIFY_REPORT
cd "$(dirname "$0")/.."

for a in "$@"; do
	case "$a" in -h | --help) set -- --help ;; esac
done
tier=${1-default} # an empty one is refused, not taken for the default
[ $# -gt 0 ] && shift
case "$tier" in
default) timeout=45m fuzztime=5s ;;
long) export LEASEHOLD_LONG=1; timeout=8h fuzztime=2m ;;
-h | --help | help)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit 0
	;;
*)
	echo "verify.sh: unknown tier '$tier' (want default or long)" >&2
	exit 64
	;;
esac
case "${LEASEHOLD_VERIFY_FUZZ:-1}" in
0 | 1) ;;
*)
	echo "verify.sh: LEASEHOLD_VERIFY_FUZZ is 1 (fuzz after the suites) or 0 (do not), not '$LEASEHOLD_VERIFY_FUZZ'" >&2
	exit 64
	;;
esac
verify_p_ok verify.sh || exit 64
# The report's file must be a regular file this script can write, or one
# it can make, before anything runs (a directory failed only after the
# engines had started), and before go list (whose failure hid this usage
# error: the red team of 4be848e). Nothing is opened or made here: a
# refused run leaves no file, and a named pipe does not block the check.
# What only the kernel can tell (a name too long, an append-only or
# immutable file) is found when the file is emptied, before the engines.
report_dir=${LEASEHOLD_VERIFY_REPORT:-/x} # absolute (above): its directory precedes its last /
report_dir=${report_dir%/*}/ # ($(dirname) dropped a newline at a name's end)
if [ -n "${LEASEHOLD_VERIFY_REPORT:-}" ] && ! {
	if [ -e "$LEASEHOLD_VERIFY_REPORT" ] || [ -L "$LEASEHOLD_VERIFY_REPORT" ]; then
		[ -f "$LEASEHOLD_VERIFY_REPORT" ] && [ -w "$LEASEHOLD_VERIFY_REPORT" ]
	else
		[ -d "$report_dir" ] && [ -w "$report_dir" ]
	fi
}; then
	echo "verify.sh: LEASEHOLD_VERIFY_REPORT '$LEASEHOLD_VERIFY_REPORT' is not a regular file it can write or make (a directory, a device or pipe, or in a missing or read-only directory)" >&2
	exit 64
fi

# After the tier, fault suites only (packages of ./testrig/verify/...): a
# flag went on to go test, where a later -p overrode LEASEHOLD_VERIFY_P's
# check (a red team of 7c73f10); a path that names no package or another
# package ran the engines and the build before go test refused it.
all=
for a in "$@"; do
	case "$a" in
	-*)
		echo "verify.sh: '$a' is not a package: verify.sh takes a tier, then fault suites' packages, and no go test flags (see --help)" >&2
		exit 64
		;;
	'') echo "verify.sh: an empty package name (see --help)" >&2 && exit 64 ;;
	esac
	[ -n "$all" ] || all=$(go list ./testrig/verify/...) || exit 1
	if ! named=$(go list "$a" 2>&1) || grep -qvxF -f <(printf '%s\n' "$all") <<<"$named"; then
		echo "verify.sh: '$a' names no fault suite (the packages of ./testrig/verify/...):" >&2
		printf '%s\n' "$named" | head -5 >&2
		exit 64
	fi
done
pkgs=("$@") mod=
if [ ${#pkgs[@]} -eq 0 ]; then
	# Every suite, the longest first (lib/verify-order.txt): three run at
	# a time, and go test starts them in the order given.
	if ! all=$(go list ./testrig/verify/...) || ! mod=$(main_module) ||
		! ordered=$(order_packages scripts/lib/verify-order.txt "$mod" <<<"$all") ||
		[ "$(grep -c . <<<"$ordered")" != "$(grep -c . <<<"$all")" ]; then
		echo "verify.sh: cannot list the fault suites in order (go list ./testrig/verify/..., scripts/lib/verify-order.txt)" >&2
		exit 1
	fi
	mapfile -t pkgs <<<"$ordered"
fi
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
own_engines= own_tmp= own_mark= made_report= outer_marks=${LEASEHOLD_PROC_MARKS-}
# On exit, also on SIGTERM or SIGHUP to this script alone (no trap for
# them: bash would run it only once the step in the foreground ended):
# the whole tree of whatever this script still runs (the suites' go test,
# the fuzzing, the fuzz targets' build), then the engines it started, then
# its temporary directory (below). Only processes that are this script's children now
# are stopped: a pid kept from earlier may belong to another process by
# then. Further signals are ignored meanwhile, so that the clean-up is not
# cut short with processes left stopped, and so is a failing step (set -e
# would end the clean-up there: CI run 95 of 2026-12-06).
cleanup() {
	trap '' INT TERM HUP
	set +e
	# What the clean-up runs does not carry this script's mark.
	export LEASEHOLD_PROC_MARKS=$outer_marks
	stop_children
	# What ended no longer this script's child (lib/proc.sh, Marks).
	[ -z "$own_mark" ] || stop_marked "$own_mark" "$own_tmp"
	[ -z "$own_engines" ] || scripts/engines.sh stop
	[ -z "$own_tmp" ] || rm -rf "$own_tmp"
	# A report made by the check above, in a run that ended before it ran.
	[ -z "$made_report" ] || rm -f -- "$LEASEHOLD_VERIFY_REPORT"
}
trap cleanup EXIT
# Its own TMPDIR for everything it runs (the suites' test directories, go's
# build directories, the prebuilt binaries, the report), removed whole on
# exit: a signal stops the suites before their own clean-up (the red team
# of 2026-12-06: a SIGTERM left a suite's 174 MB test directory and go's
# build directories in TMPDIR).
own_tmpdir own_tmp lhv verify.sh
export TMPDIR=$own_tmp
# The last check, before the engines: the report is opened to append
# (what it holds is kept until the run starts; one made here is removed if
# the run ends before that), so that what only the kernel can tell (a name
# too long, an immutable file, a read-only file system) is a usage error
# too: it was bash's own message and exit 1 once the engines had started
# (the red team of 4be848e).
if [ -n "${LEASEHOLD_VERIFY_REPORT:-}" ]; then
	[ -e "$LEASEHOLD_VERIFY_REPORT" ] || made_report=1
	if ! { : >>"$LEASEHOLD_VERIFY_REPORT"; } 2>/dev/null; then
		made_report=
		echo "verify.sh: LEASEHOLD_VERIFY_REPORT '$LEASEHOLD_VERIFY_REPORT' cannot be written (a name too long, an immutable file, a read-only file system)" >&2
		exit 64
	fi
fi
if [ -z "${LEASEHOLD_TEST_PG_BIN:-}" ]; then
	own_engines=1
	export LEASEHOLD_ENGINES_CLAIM=$$ # one test command per directory
	# Not eval "$(scripts/engines.sh start)": eval would go on after a failure.
	st=0
	exports=$(scripts/engines.sh start) || st=$?
	if [ $st -eq 75 ]; then
		own_engines= # the engines are the other command's
		echo "verify.sh: FAILED: the engines' directory is in use by another test command (above)" >&2
		exit 75
	elif [ $st -ne 0 ]; then
		failed=$(cat "${LEASEHOLD_ENGINES_DIR:-.engines}/failed" 2>/dev/null || echo "see above")
		echo "verify.sh: FAILED: the test engines did not start: $failed" >&2
		exit 1
	fi
	eval "$exports"
fi
export LEASEHOLD_REQUIRE_ENGINES=${LEASEHOLD_REQUIRE_ENGINES:-1}
# Everything it runs from here carries its mark (after the engines, which
# engines.sh stops): the clean-up stops what a signal left with no parent.
new_mark own_mark verify
add_mark "$own_mark"

report=${LEASEHOLD_VERIFY_REPORT:-}
[ -n "$report" ] || report=$own_tmp/report
export LEASEHOLD_VERIFY_REPORT=$report
if ! { : >"$report"; } 2>/dev/null; then
	echo "verify.sh: LEASEHOLD_VERIFY_REPORT '$report' cannot be emptied (an append-only file?)" >&2
	exit 64
fi
made_report=

status=0
started=$(date +%s)
echo "== fault suites, $tier tier: go test ${pkgs[*]#"$mod/"}"
# Build the test binaries first, two packages at a time: with -p 1 below
# the compiler would also run one package at a time (about 270 s of a cold
# build cache on 2 cores; this takes about 170 s). The run then links from
# the build cache. A build failure here is reported by the run below.
# Not when test.sh's race stage has just done it, beside its tests
# (LEASEHOLD_VERIFY_WARM names the file it then makes).
if [ -z "${LEASEHOLD_VERIFY_WARM:-}" ] || [ ! -e "$LEASEHOLD_VERIFY_WARM" ]; then
	prebuilt=$own_tmp/prebuilt
	mkdir "$prebuilt" && go test -c -p 2 -o "$prebuilt/" "${pkgs[@]}" >/dev/null 2>&1 || true
	rm -rf "$prebuilt"
else
	echo "== built beside the race stage ($LEASEHOLD_VERIFY_WARM exists): no build first"
fi
fuzzing=
if [ "${LEASEHOLD_VERIFY_FUZZ:-1}" = 0 ]; then
	echo "== no fuzzing (LEASEHOLD_VERIFY_FUZZ=0)"
elif [ $# -eq 0 ] && [ -x scripts/fuzz.sh ]; then
	fuzzing=1
fi
if [ -n "$fuzzing" ]; then
	# The fuzz targets' instrumented builds (about 3 minutes of compiling
	# after the suites) are made while the suites run, which mostly wait;
	# the fuzzing below then only links. At nice 10, so that the suites,
	# which time faults, come first. A failed build is reported there.
	nice -n 10 scripts/fuzz.sh --build >/dev/null 2>&1 &
	fuzzbuild=$!
	building() { jobs -rp | grep -qx "$fuzzbuild"; }
fi
# Three packages at a time (LEASEHOLD_VERIFY_P): each suite starts private
# engine instances, and its checks are on order and counts, which must hold
# on a loaded machine anyway; the suites wait on TTLs and faults more than
# they compute (one at a time, a run used about a third of 2 cores; two at
# a time, with the fuzz build beside them, three quarters of the one core
# a busy loop left: CI runs 112 and 113).
go test -count=1 -p "$VERIFY_P" -timeout "$timeout" "${pkgs[@]}" || status=$?
if [ -n "$fuzzing" ]; then
	# At most 20 minutes more (a cold build beside the suites took 6
	# minutes at nice 19): a build that hangs is stopped, and the fuzzing
	# builds what it needs itself. Asked of bash's job table, not of the
	# pid, which another process may have once the build has ended.
	if building; then
		echo "== waiting for the fuzz targets' build (scripts/fuzz.sh --build)"
		waited=0
		while building && [ $waited -lt 1200 ]; do
			sleep 1
			waited=$((waited + 1))
		done
		if building; then
			echo "verify.sh: the fuzz targets' build was still going 20 minutes after the suites; stopped"
			stop_tree "$fuzzbuild"
		fi
	fi
	wait "$fuzzbuild" || true
	echo "== fuzzing, $fuzztime per target"
	scripts/fuzz.sh "$fuzztime" || status=$?
fi
echo "== verification report ($tier tier, $(($(date +%s) - started)) s)"
go run ./testrig/verify/report "$report" || status=$?
if [ ! -s "$report" ]; then
	# Packages that ran no suite (a typo, a package without rows) pass
	# nothing: a report without rows is a failure.
	echo "verify.sh: FAILED: no suite row was reported by ${pkgs[*]}" >&2
	[ $status -eq 0 ] && status=1
fi
exit $status
