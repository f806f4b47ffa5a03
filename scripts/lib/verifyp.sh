# shellcheck shell=bash
# verify_p_ok: whether LEASEHOLD_VERIFY_P (the fault suites run at a time
# by scripts/verify.sh; unset or empty: 3) is a whole number from 1 to 64
# with no leading 0. go test reads -p's leading 0 as octal (08: an error,
# after the engines and the build) and spins without end on a huge one.
# Then VERIFY_P holds it (the default filled in); else it says so, naming
# the caller ($1), and fails. scripts/test.sh checks it before its first
# stage, verify.sh before anything it runs.
verify_p_ok() {
	VERIFY_P=${LEASEHOLD_VERIFY_P:-3}
	case "$VERIFY_P" in
	[1-9] | [1-5][0-9] | 6[0-4]) return 0 ;;
	esac
	echo "$1: LEASEHOLD_VERIFY_P is how many suites run at a time, a whole number from 1 to 64 with no leading 0, not '$LEASEHOLD_VERIFY_P'" >&2
	return 1
}
