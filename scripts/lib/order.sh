# The race and verify stages' package orders (sourced by test.sh and verify.sh,
# not run).

# order_packages LIST MODULE: reads import paths, one a line, on stdin and
# prints them again, those that LIST names first, in its order, then the
# others in the order read. LIST has one package directory a line,
# relative to the module's root (cmd/leasehold; "./" before and "/" after
# are dropped; "." is the root), then anything (a time, say), and
# "#" comments; CRLF line ends are taken as LF. A line naming no package
# read is reported on stderr and ignored, a package named twice is
# printed once; a LIST that cannot be read fails (status 2), printing
# nothing.
order_packages() {
	LIST=$1 MOD=$2 awk '
		BEGIN {
			list = ENVIRON["LIST"]; mod = ENVIRON["MOD"]
			while ((r = (getline line < list)) > 0) {
				sub(/\r$/, "", line)
				if (split(line, f) == 0 || f[1] ~ /^#/) continue
				p = f[1]; sub(/^\.\//, "", p); sub(/\/$/, "", p)
				order[++n] = (p == "." || p == "") ? mod : mod "/" p
			}
			if (r < 0) { print "cannot read " list > "/dev/stderr"; bad = 1; exit 2 }
		}
		{ have[$0] = 1; pkg[++m] = $0 }
		END {
			if (bad) exit 2
			for (i = 1; i <= n; i++) {
				if (!(order[i] in have)) print list ": names " order[i] ", not a package here; ignored" > "/dev/stderr"
				else if (!(order[i] in done)) { print order[i]; done[order[i]] = 1 }
			}
			for (i = 1; i <= m; i++) if (!(pkg[i] in done)) { print pkg[i]; done[pkg[i]] = 1 }
		}'
}

# main_module: the import path of the module whose root is the current
# directory (go list -m names every module of a go.work instead).
main_module() {
	go list -f '{{.Module.Path}}' .
}
