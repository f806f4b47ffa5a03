#!/usr/bin/env bash
# Builds a release of the leasehold command into a directory, for a
# package or a tarball:
#
#   scripts/build-release.sh [DIR]        # default: dist
#
#   DIR/leasehold                        the command (static, -trimpath)
#   DIR/man/man1/*.1                     the manual pages (docs/man)
#   DIR/completion/leasehold.bash        bash  (.../bash-completion/completions/leasehold)
#   DIR/completion/_leasehold            zsh   (a directory of $fpath)
#   DIR/completion/leasehold.fish        fish  (.../fish/vendor_completions.d/)
#   DIR/systemd/*                        the units of packaging/systemd
#
# "leasehold --version" then prints the version, the commit and its date,
# which the build sets with -ldflags -X (cmd/leasehold/cli's Version,
# Commit and CommitDate). From a git checkout they are `git describe
# --tags --always --dirty`, HEAD (+modified if the tree has changes) and
# HEAD's committer date, so two builds of one commit are the same bytes.
# Outside a checkout (a source tarball), or to override them, set
# LEASEHOLD_VERSION, LEASEHOLD_COMMIT and LEASEHOLD_COMMIT_DATE.
#
# GOOS and GOARCH cross-compile; the completion scripts are then written
# only if the built command runs here.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
case "$out" in
-h | --help | help)
	sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
	;;
esac

version=${LEASEHOLD_VERSION:-}
commit=${LEASEHOLD_COMMIT:-}
date=${LEASEHOLD_COMMIT_DATE:-}
if git rev-parse --git-dir >/dev/null 2>&1; then
	[ -n "$version" ] || version=$(git describe --tags --always --dirty)
	if [ -z "$commit" ]; then
		commit=$(git rev-parse HEAD)
		if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
			commit+=+modified
		fi
	fi
	# in UTC, as go build records vcs.time
	[ -n "$date" ] || date=$(TZ=UTC0 git show -s --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd HEAD)
fi
if [ -z "$version" ] || [ -z "$commit" ] || [ -z "$date" ]; then
	echo "build-release.sh: not a git checkout: set LEASEHOLD_VERSION, LEASEHOLD_COMMIT and LEASEHOLD_COMMIT_DATE" >&2
	exit 64
fi
for v in "$version" "$commit" "$date"; do
	case "$v" in
	*[[:space:]\'\"]*)
		echo "build-release.sh: no spaces or quotes in the version, commit or date: '$v'" >&2
		exit 64
		;;
	esac
done

pkg=github.com/leasehold/leasehold/cmd/leasehold/cli
mkdir -p "$out/man/man1" "$out/systemd"
# -buildvcs=false: the commit comes from -X, the same in a checkout and
# a tarball.
CGO_ENABLED=0 go build -trimpath -buildvcs=false \
	-ldflags "-s -w -X $pkg.Version=$version -X $pkg.Commit=$commit -X $pkg.CommitDate=$date" \
	-o "$out/leasehold" ./cmd/leasehold
cp docs/man/*.1 "$out/man/man1/"
cp packaging/systemd/* "$out/systemd/"
if "$out/leasehold" --version >/dev/null 2>&1; then
	mkdir -p "$out/completion"
	"$out/leasehold" completion bash >"$out/completion/leasehold.bash"
	"$out/leasehold" completion zsh >"$out/completion/_leasehold"
	"$out/leasehold" completion fish >"$out/completion/leasehold.fish"
else
	echo "build-release.sh: the command does not run here (GOOS/GOARCH): no completion scripts; run \"leasehold completion SHELL\" where it runs" >&2
fi
"$out/leasehold" --version 2>/dev/null || echo "built $out/leasehold: $version (commit $commit, dated $date)"
