#!/usr/bin/env bash
# Runs every fuzz target of the module (suite R12 of docs/verification.md),
# one after the other, for a given time each:
#
#   scripts/fuzz.sh          # 10s per target (verify.sh's default tier: 5s)
#   scripts/fuzz.sh 2m       # the long tier
#   scripts/fuzz.sh --build  # only build (below)
#
# Targets are found in the _test.go files of the module's packages
# (func FuzzXxx(f *testing.F)). For each it prints go test's output and a
# summary, and when $LEASEHOLD_VERIFY_REPORT names a file appends a report
# row to it:
#   {"suite":"R12","store":"<pkg>.<target>","ops":<execs>,"faults":0,
#    "violations":0|1,"checker":"ok"|"crasher"|"failed"}
# ("failed": go test failed without a failing input, e.g. a build error).
# Exits non-zero if any target failed. Fuzzing keeps its corpus in the Go
# cache; only a failing input is written into the package's testdata/fuzz.
# --build compiles each package's instrumented test binary and runs nothing:
# its packages land in the Go build cache, so a later run only links
# (verify.sh builds while the fault suites run; about 55 s per package on a
# cold cache and 2 cores). Exits non-zero if a build failed.
#
# Ctrl-C (SIGINT to its process group) stops the run, exit 130; SIGTERM or
# SIGHUP, to it alone or to its group, stops it too (it dies of the signal:
# 143, 129). Either way what it runs (go test, the test binary and its fuzz
# workers) is stopped and what it made is removed: it runs with a TMPDIR
# of its own (go's fuzz-* files and build directories land there).
set -uo pipefail
# shellcheck source=lib/proc.sh
. "$(dirname "$0")/lib/proc.sh"
abs_tmpdir # before the cd: a relative TMPDIR is the caller's
cd "$(dirname "$0")/.."
fuzztime=${1-10s} # an empty argument is refused below, not the default
case "$fuzztime" in
-h | --help | help)
	sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
	;;
--build)
	if [ $# -gt 1 ]; then
		echo "fuzz.sh: --build takes no other argument, not: $*" >&2
		exit 64
	fi
	;;
esac
# On exit, also on SIGTERM or SIGHUP to this script alone (no trap for
# them: bash would run it only once the go test in the foreground ended):
# the whole tree of whatever this script still runs (go test, tee, the test
# binary and its fuzz workers), then its temporary directory (below), as
# verify.sh does (the red team of 2026-12-06 (second): a SIGTERM left the
# fuzzing running with no parent until -fuzztime ended, and go's two
# 100 MB fuzz-* files and a go-build directory in TMPDIR). Only processes
# that are this script's children now are stopped; further signals are
# ignored meanwhile, so that the clean-up is not cut short.
own_tmp= outer_marks=${LEASEHOLD_PROC_MARKS-}
new_mark own_mark fuzz
cleanup() {
	trap '' INT TERM HUP
	export LEASEHOLD_PROC_MARKS=$outer_marks
	stop_children
	# What ended no longer this script's child (lib/proc.sh, Marks).
	stop_marked "$own_mark" "$own_tmp"
	[ -z "$own_tmp" ] || rm -rf "$own_tmp"
}
trap cleanup EXIT
# Its own TMPDIR for everything it runs (go's build directories, the fuzz
# workers' files, the --build binaries, the log), removed whole on exit.
# Exits 64, naming TMPDIR, when it cannot be made.
own_tmpdir own_tmp lhf fuzz.sh
export TMPDIR=$own_tmp
add_mark "$own_mark"
# Ctrl-C: go test catches SIGINT and exits 1, and bash, seeing its child
# exit normally, went on to the next target (the red team of 2026-12-06
# (second): each at the given time, then exit 1). The trap runs once the
# target's go test has ended, which is at once: the run stops, with 130.
# Set after own_tmpdir, which resets INT to the default when it is done.
trap 'exit 130' INT
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
# One argument at most: a time per target as go test's -fuzztime takes it
# (a duration such as 10s, 2m or 1m30s, or a count of runs such as 500x;
# not zero), as go itself judges it (testrig/fuzztime: a check of the
# script's own let 0.1ns and sums beyond Go's longest duration through,
# the red team of 2026-12-06). Refused before anything is built.
if [ "$fuzztime" != --build ]; then
	why=
	if [ $# -gt 1 ]; then
		why="one argument at most"
	elif ! out=$(go run ./testrig/fuzztime "$fuzztime" 2>&1); then
		why=$(head -n 1 <<<"$out")
	fi
	if [ -n "$why" ]; then
		echo "fuzz.sh: want one argument, the time per target (e.g. 10s, 2m, 500x), not: ${*:-an empty one} ($why)" >&2
		exit 64
	fi
fi

module=$(go list -m) || exit 1
targets=()
while read -r pkg dir; do
	for f in "$dir"/*_test.go; do
		[ -e "$f" ] || continue
		while read -r name; do
			targets+=("$pkg $name")
		done < <(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(f \*testing\.F).*/\1/p' "$f")
	done
done < <(go list -f '{{.ImportPath}} {{.Dir}}' ./...)

if [ ${#targets[@]} -eq 0 ]; then
	echo "fuzz.sh: no fuzz targets found" >&2
	exit 1
fi

if [ "$fuzztime" = --build ]; then
	bin=$own_tmp/build # removed with own_tmp
	mkdir "$bin" || exit 1
	built=" " n=0 failed=()
	for t in "${targets[@]}"; do
		read -r pkg name <<<"$t"
		case "$built" in *" $pkg "*) continue ;; esac
		built+="$pkg "
		n=$((n + 1))
		# Which target -fuzz names does not matter: the whole package and
		# the module's packages it imports are instrumented.
		go test -c -fuzz "^${name}\$" -o "$bin/$n.test" "$pkg" || failed+=("$pkg")
	done
	if [ ${#failed[@]} -gt 0 ]; then
		echo "fuzz.sh: FAILED: the build of ${#failed[@]} of $n packages with fuzz targets: ${failed[*]}" >&2
		exit 1
	fi
	echo "fuzz.sh: built the fuzz targets of $n packages"
	exit 0
fi
echo "fuzz.sh: ${#targets[@]} targets, $fuzztime each"

log=$own_tmp/log # removed with own_tmp
status=0
summary=()
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	short=${pkg#"$module"}
	short=${short#/}
	[ -z "$short" ] && short=${module##*/}
	echo "== $short $name"
	# -parallel 2: one fuzzing worker per core of a 2-core CI machine.
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -parallel 2 "$pkg" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	# Go's fuzzing coordinator can fail a target with a bare "context
	# deadline exceeded" when -fuzztime ends while a starved worker is
	# mid-call (go.dev/issue/75804, fixed in Go 1.27; CI saw it on a
	# loaded machine): no input is written, nothing of the target failed.
	# That one case is run once more; any other failure stands.
	if [ "$rc" -ne 0 ] && grep -q 'context deadline exceeded' "$log" &&
		! grep -q 'Failing input written to\|panic:\|_test.go:[0-9]' "$log"; then
		echo "fuzz.sh: $short.$name: the coordinator's deadline failure of go.dev/issue/75804 (no input written); running it once more"
		go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -parallel 2 "$pkg" 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
	fi
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$')
	execs=${execs:-0}
	violations=0 checker=ok
	if [ "$rc" -ne 0 ]; then
		violations=1 checker=failed
		grep -q 'Failing input written to\|--- FAIL: '"$name" "$log" && checker=crasher
		status=1
	fi
	summary+=("$(printf '%-42s %12s execs  %s' "$short.$name" "$execs" "$checker")")
	if [ -n "${LEASEHOLD_VERIFY_REPORT:-}" ]; then
		printf '{"suite":"R12","store":"%s.%s","ops":%d,"faults":0,"violations":%d,"checker":"%s"}\n' \
			"$short" "$name" "$execs" "$violations" "$checker" >>"$LEASEHOLD_VERIFY_REPORT"
	fi
done
echo "== fuzzing summary ($fuzztime per target)"
printf '%s\n' "${summary[@]}"
exit $status
