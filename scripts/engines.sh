#!/usr/bin/env bash
# Throwaway engines for the tests, on free loopback ports in temp directories.
#
#   exports=$(scripts/engines.sh start) && eval "$exports"
#                               installs what is missing, starts PostgreSQL,
#                               Redis, dynalite, etcd and a 3-member etcd
#                               cluster, prints exports
#   scripts/engines.sh stop     stops them by PID, removes their files
#   scripts/engines.sh etcd-member kill|start N
#                               SIGKILLs member N (1-3) of the etcd cluster
#                               (below), or starts it again on its data
#
# If something the tests need cannot be installed, or an engine does not
# start, "start" says so on stderr ("engines: FAILED: Redis did not start")
# with the engine's log, stops the engines it had started, prints no
# exports and exits 1. Check its status before eval: eval "$(... start)"
# alone goes on after a failure, even under set -e, and the tests of the
# missing engine would then skip (or, where engines are required, fail).
#
# Exports: LEASEHOLD_TEST_POSTGRES, LEASEHOLD_TEST_REDIS,
# LEASEHOLD_TEST_DYNAMODB (a dynalite endpoint) and LEASEHOLD_TEST_ETCD (URLs
# of the shared test servers, one process each); LEASEHOLD_TEST_ETCD_CLUSTER,
# a 3-member etcd cluster on loopback (etcd://h1,h2,h3/), for the fault
# suite that kills and restarts its members (R7), which it does through
# LEASEHOLD_TEST_ETCD_CLUSTER_CTL (a script that runs "etcd-member" above
# on this state directory); and LEASEHOLD_TEST_PG_BIN,
# LEASEHOLD_TEST_REDIS_SERVER, LEASEHOLD_TEST_DYNALITE and
# LEASEHOLD_TEST_ETCD_BIN (programs, for tests that start, kill and restart
# private instances), LEASEHOLD_TEST_NODE_MODULES (the npm packages) and
# LEASEHOLD_TEST_CHROMIUM (Debian's chromium, for the dashboard's browser
# test).
#
# One test command per state directory: a command that starts engines for
# its run (scripts/test.sh, verify.sh, flakes.sh) exports
# LEASEHOLD_ENGINES_CLAIM=<its PID>, and "start" then claims the directory
# for that process ($STATE/claim: its PID and start time). While the
# claiming process lives, "start" and "stop" run for it alone: any other
# caller is refused with exit 75, naming it, and changes nothing (a second
# test command on the directory would have stopped the first one's engines
# and left its own behind). A claim whose process is gone is dropped.
#
# Settings: LEASEHOLD_ENGINES_DIR, where the script keeps its state (default
# .engines; "stop" stops the engines named there); LEASEHOLD_NPM_DIR, where
# the npm packages go (default $LEASEHOLD_ENGINES_DIR/npm);
# LEASEHOLD_ENGINES_NO_INSTALL=1, install nothing: fail, naming what is
# missing. After a failure, $LEASEHOLD_ENGINES_DIR/failed says what failed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${LEASEHOLD_ENGINES_DIR:-$ROOT/.engines}
NPM_DIR=${LEASEHOLD_NPM_DIR:-$STATE/npm}

log() { echo "engines: $*" >&2; }

as_root() { [ "$(id -u)" = 0 ]; }

# fail WHAT [DIR]: reports that WHAT failed, with the logs in DIR, stops
# every engine started so far, and exits 1.
fail() {
	local what=$1 dir=${2:-} f n
	log "FAILED: $what"
	if [ -n "$dir" ] && [ -d "$dir" ]; then
		for f in "$dir"/*.log; do
			[ -f "$f" ] || continue
			n=$(wc -l <"$f")
			if [ "$n" -gt 100 ]; then
				log "--- $(basename "$f") (last 100 of $n lines)"
			else
				log "--- $(basename "$f")"
			fi
			tail -n 100 "$f" >&2
		done
		log "---"
	fi
	stop
	log "stopped the engines started so far; FAILED: $what"
	echo "$what" >"$STATE/failed" || true
	exit 1
}

# step WHAT KEY FUNCTION: runs FUNCTION with errexit on and adds what it
# prints to the exports; fails naming WHAT, with the logs of the directory
# that $STATE/KEY.dir names, if any of its commands fails.
EXPORTS=
step() {
	local what=$1 key=$2 fn=$3 out st dir= attempt
	for attempt in 1 2 3; do
		set +e
		out=$(
			set -e
			"$fn"
		)
		st=$?
		set -e
		# A port taken between its check and the bind fails the start:
		# the single-process engines stop what they started and try again
		# on other ports.
		case "$key" in dynalite | etcd | etcd-cluster | redis) ;; *) break ;; esac
		[ "$st" -ne 0 ] && [ "$attempt" -lt 3 ] || break
		log "$what did not start (exit status $st); trying again on other ports"
		stop_one "$key"
	done
	if [ "$st" -ne 0 ]; then
		[ -f "$STATE/$key.dir" ] && dir=$(cat "$STATE/$key.dir")
		fail "$what did not start (exit status $st)" "$dir"
	fi
	EXPORTS+="$out"$'\n'
}

apt_install() {
	if ! as_root; then
		log "need $* but not root: install it yourself"
		return 1
	fi
	if [ ! -e "$STATE/.apt-updated" ]; then
		# A failed update (one unreachable mirror) need not fail the install:
		# what the install leaves missing is checked afterwards.
		if DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2; then
			touch "$STATE/.apt-updated"
		else
			log "apt-get update failed; installing from the package lists at hand"
		fi
	fi
	# policy-rc.d keeps the packages from starting system services of their own.
	local made=0 st=0
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2 || st=$?
	if [ "$made" = 1 ]; then
		rm -f /usr/sbin/policy-rc.d
	fi
	return "$st"
}

pg_bin() {
	for d in /usr/lib/postgresql/*/bin; do
		[ -x "$d/initdb" ] && { echo "$d"; return; }
	done
	return 1
}

chromium_bin() {
	local b
	for b in chromium chromium-browser; do
		command -v "$b" && return
	done
	return 1
}

# have NAME: NAME is a program in PATH or in an sbin directory (which a
# non-login root shell may lack in PATH).
have() { command -v "$1" >/dev/null || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }

# missing_packages prints the Debian packages of the programs the tests
# need that are not installed.
missing_packages() {
	have redis-server || echo redis-server
	pg_bin >/dev/null || echo postgresql
	have etcd || echo etcd-server
	# ip and nft for R7's network namespaces and partitions, which need
	# root (R7 and its network test skip without it).
	if as_root; then
		have ip || echo iproute2
		have nft || echo nftables
	fi
	have node || echo nodejs
	if ! npm_installed; then
		have npm || echo npm
	fi
	chromium_bin >/dev/null || echo chromium
	# Debian's own interpreter for the Python client's tests
	# (clients/python/run_tests.sh), with Debian's boto3 for its DynamoDB
	# part, PyYAML to read docs/openapi.yaml and mypy for its type check
	# (PyPI is not reachable in CI).
	[ -x /usr/bin/python3 ] || echo python3
	/usr/bin/python3 -c 'import boto3' 2>/dev/null || echo python3-boto3
	/usr/bin/python3 -c 'import yaml' 2>/dev/null || echo python3-yaml
	# What a package gives (docs/packaging.md): the shells the completion
	# scripts are checked in, man to render the pages, systemd-analyze to
	# verify the units (cmd/leasehold's tests fail without them in CI).
	have zsh || echo zsh
	have fish || echo fish
	[ -f /usr/share/bash-completion/bash_completion ] || echo bash-completion
	have man || echo man-db
	have systemd-analyze || echo systemd
	/usr/bin/python3 -c 'import mypy' 2>/dev/null || echo python3-mypy
}

# npm_installed: dynalite (MIT), a DynamoDB API on LevelDB or memory;
# asl-validator and jsonata (the reference implementation), to check the
# state machines that "leasehold sfn" writes; @aws-cdk/cfnspec (the
# CloudFormation resource specification), to check its templates.
npm_installed() {
	[ -f "$NPM_DIR/node_modules/dynalite/cli.js" ] && [ -d "$NPM_DIR/node_modules/asl-validator" ] &&
		[ -d "$NPM_DIR/node_modules/jsonata" ] &&
		[ -f "$NPM_DIR/node_modules/@aws-cdk/cfnspec/spec/specification.json" ]
}

install() {
	local need
	need=$(missing_packages | tr '\n' ' ')
	need=${need% }
	if [ -n "$need" ]; then
		if [ "${LEASEHOLD_ENGINES_NO_INSTALL:-}" = 1 ]; then
			fail "not installed: $need (LEASEHOLD_ENGINES_NO_INSTALL=1 installs nothing)"
		fi
		# shellcheck disable=SC2086 # one word per package
		apt_install $need || fail "could not install $need (apt-get, see above)"
		need=$(missing_packages | tr '\n' ' ')
		[ -z "$need" ] || fail "not installed after apt-get: $need"
	fi
	if ! npm_installed; then
		if [ "${LEASEHOLD_ENGINES_NO_INSTALL:-}" = 1 ]; then
			fail "not installed: the npm packages dynalite, asl-validator, jsonata and @aws-cdk/cfnspec in $NPM_DIR (LEASEHOLD_ENGINES_NO_INSTALL=1 installs nothing)"
		fi
		mkdir -p "$NPM_DIR"
		(cd "$NPM_DIR" && npm install --no-audit --no-fund --loglevel=error dynalite@4 asl-validator@4 jsonata@2 @aws-cdk/cfnspec@2 >&2) ||
			fail "could not install the npm packages dynalite, asl-validator, jsonata and @aws-cdk/cfnspec (npm, see above)"
		npm_installed || fail "not installed after npm install: the npm packages dynalite, asl-validator, jsonata and @aws-cdk/cfnspec in $NPM_DIR"
	fi
}

# free_port prints a port nobody listens on, below the kernel's ephemeral
# range (ip_local_port_range), so that no outgoing connection's local port
# can take it between this check and the engine's bind.
free_port() {
	local p low=32768 span
	read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
	span=$((low - 10000))
	[ "$span" -ge 2000 ] || { low=60000 span=40000; }
	for _ in $(seq 1 200); do
		p=$((low - 1 - RANDOM % span))
		if ! (echo >/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	log "no free port found"
	return 1
}

# alive PID: the process exists and has not exited (a zombie has).
alive() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[ "${stat:0:1}" != Z ]
}

# stop_pid PID: SIGTERM, SIGKILL if it still runs 30 s later; returns when
# the process is gone.
stop_pid() {
	local pid=$1
	kill "$pid" 2>/dev/null || return 0
	for _ in $(seq 1 300); do
		alive "$pid" || return 0
		sleep 0.1
	done
	log "process $pid ignored SIGTERM for 30 s: SIGKILL"
	kill -KILL "$pid" 2>/dev/null || return 0
	for _ in $(seq 1 100); do
		alive "$pid" || return 0
		sleep 0.1
	done
	log "process $pid still runs after SIGKILL"
}

# wait_port PORT PID: returns when PORT accepts connections; fails as soon
# as process PID has exited, or after 60 s (a loaded CI machine is slow).
wait_port() {
	for _ in $(seq 1 1200); do
		(echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
		if ! alive "$2"; then
			log "process $2 exited before it listened on port $1"
			return 1
		fi
		sleep 0.05
	done
	log "nothing listened on port $1 within 60 s"
	return 1
}

# Each start_ function records its directory in $STATE before it starts
# anything, so that stop (and fail) find whatever it started.

start_dynalite() {
	local port dir
	port=$(free_port)
	dir=$(mktemp -d /tmp/leasehold-dynalite.XXXXXX)
	echo "$dir" >"$STATE/dynalite.dir"
	# dynalite rethrows a request aborted by its client (ECONNRESET
	# "aborted": a test's deadline, a killed worker) as an uncaught exception
	# and exits, which would fail every later DynamoDB test; DynamoDB itself
	# just drops such a request. Ignore exactly that error.
	cat >"$dir/ignore-aborted.js" <<'JS'
process.on('uncaughtException', function (err) {
  if (err && err.code === 'ECONNRESET' && err.message === 'aborted') {
    console.error('ignored a request aborted by its client');
    return;
  }
  console.error(err);
  process.exit(7);
});
JS
	nohup node --require "$dir/ignore-aborted.js" "$NPM_DIR/node_modules/dynalite/cli.js" --port "$port" --host 127.0.0.1 \
		>"$dir/dynalite.log" 2>&1 &
	echo $! >"$dir/pid"
	wait_port "$port" "$(cat "$dir/pid")"
	echo "export LEASEHOLD_TEST_DYNAMODB='dynamodb://leasehold_test?endpoint=http://127.0.0.1:$port&region=us-east-1'"
	echo "export LEASEHOLD_TEST_DYNALITE='$NPM_DIR/node_modules/dynalite/cli.js'"
	echo "export LEASEHOLD_TEST_NODE_MODULES='$NPM_DIR/node_modules'"
	echo "export AWS_ACCESS_KEY_ID=\${AWS_ACCESS_KEY_ID:-test} AWS_SECRET_ACCESS_KEY=\${AWS_SECRET_ACCESS_KEY:-test}"
	log "dynalite (DynamoDB API) on 127.0.0.1:$port ($dir)"
}

start_etcd() {
	local port peer dir bin
	bin=$(command -v etcd)
	port=$(free_port)
	peer=$(free_port)
	while [ "$peer" = "$port" ]; do peer=$(free_port); done
	dir=$(mktemp -d /tmp/leasehold-etcd.XXXXXX)
	echo "$dir" >"$STATE/etcd.dir"
	nohup "$bin" --name leasehold-test --data-dir "$dir/data" \
		--listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
		--listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
		--initial-cluster "leasehold-test=http://127.0.0.1:$peer" >"$dir/etcd.log" 2>&1 &
	echo $! >"$dir/pid"
	wait_port "$port" "$(cat "$dir/pid")"
	echo "export LEASEHOLD_TEST_ETCD='etcd://127.0.0.1:$port'"
	echo "export LEASEHOLD_TEST_ETCD_BIN='$bin'"
	log "etcd on 127.0.0.1:$port ($dir)"
}

# The etcd cluster: one directory with, per member K (1-3), its data
# (nK/), log (nK.log) and pid (nK.pid), and "ports" (a line "K client
# peer" per member). A member's command line names the directory, so
# "owned" recognises it after a restart too.
start_etcd_cluster() {
	local dir i p taken= initial= urls=
	dir=$(mktemp -d /tmp/leasehold-etcd-cluster.XXXXXX)
	echo "$dir" >"$STATE/etcd-cluster.dir"
	: >"$dir/ports"
	for i in 1 2 3; do
		local pair=()
		while [ ${#pair[@]} -lt 2 ]; do
			p=$(free_port)
			case " $taken " in *" $p "*) continue ;; esac
			taken+=" $p"
			pair+=("$p")
		done
		echo "$i ${pair[0]} ${pair[1]}" >>"$dir/ports"
		initial+="${initial:+,}m$i=http://127.0.0.1:${pair[1]}"
		urls+="${urls:+,}127.0.0.1:${pair[0]}"
	done
	echo "$initial" >"$dir/initial-cluster"
	# All three first: a member serves clients only once a quorum is up.
	for i in 1 2 3; do
		member_launch "$dir" "$i"
	done
	for i in 1 2 3; do
		member_wait "$dir" "$i"
	done
	printf '#!/usr/bin/env bash\n# etcd-member kill|start N on the engines of %s\nLEASEHOLD_ENGINES_DIR=%q exec %q etcd-member "$@"\n' \
		"$STATE" "$STATE" "$ROOT/scripts/engines.sh" >"$dir/member"
	chmod +x "$dir/member"
	echo "export LEASEHOLD_TEST_ETCD_CLUSTER='etcd://$urls/'"
	echo "export LEASEHOLD_TEST_ETCD_CLUSTER_CTL='$dir/member'"
	log "etcd cluster on $urls ($dir)"
}

# member_port DIR K client|peer: a port of member K.
member_port() {
	local k c p
	while read -r k c p; do
		[ "$k" = "$2" ] || continue
		if [ "$3" = client ]; then echo "$c"; else echo "$p"; fi
		return 0
	done <"$1/ports"
	return 1
}

# member_launch DIR K: starts member K of the cluster in DIR (on its data,
# if it has some: etcd then ignores the --initial-cluster flags).
member_launch() {
	local dir=$1 k=$2 client peer
	client=$(member_port "$dir" "$k" client)
	peer=$(member_port "$dir" "$k" peer)
	nohup "$(command -v etcd)" --name "m$k" --data-dir "$dir/n$k" \
		--listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
		--listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
		--initial-cluster "$(cat "$dir/initial-cluster")" --initial-cluster-token "$(basename "$dir")" \
		>>"$dir/n$k.log" 2>&1 &
	echo $! >"$dir/n$k.pid"
}

member_wait() { wait_port "$(member_port "$1" "$2" client)" "$(cat "$1/n$2.pid")"; }

# etcd_member kill|start K: see the header. Acts only on the process that
# the member's pid file names and that is still that member ("owned").
etcd_member() {
	local dir pid
	case "${1:-}:${2:-}" in kill:[123] | start:[123]) ;; *)
		echo "usage: $0 etcd-member kill|start 1|2|3" >&2
		exit 64
		;;
	esac
	[ -f "$STATE/etcd-cluster.dir" ] || { log "no etcd cluster in $STATE"; exit 1; }
	dir=$(made_dir etcd-cluster) || { log "no etcd cluster of this script's in $STATE"; exit 1; }
	pid=$(cat "$dir/n$2.pid" 2>/dev/null || true)
	if [ "$1" = kill ]; then
		if [ -n "$pid" ] && alive "$pid" && owned "$pid" "$dir" etcd; then
			kill -KILL "$pid"
			# Gone means its port closed too: the main thread of a killed
			# process shows as a zombie while its other threads still
			# exit holding its sockets (seen in CI: the port answered
			# after alive said no).
			local port
			port=$(member_port "$dir" "$2" client)
			for _ in $(seq 1 300); do
				if ! alive "$pid" && ! (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
					return 0
				fi
				sleep 0.05
			done
			log "etcd member $2 (process $pid) still runs, or its port still answers, 15 s after SIGKILL"
			exit 1
		fi
		log "etcd member $2 is not running"
		return 0
	fi
	if [ -n "$pid" ] && alive "$pid" && owned "$pid" "$dir" etcd; then
		log "etcd member $2 already runs (process $pid)"
		return 0
	fi
	member_launch "$dir" "$2"
	member_wait "$dir" "$2"
}

start_postgres() {
	local bin port dir
	bin=$(pg_bin)
	port=$(free_port)
	dir=$(mktemp -d /tmp/leasehold-pg.XXXXXX)
	echo "$dir" >"$STATE/pg.dir"
	local run=()
	if as_root; then
		chown postgres "$dir"
		run=(runuser -u postgres --)
	fi
	"${run[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1
	"${run[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
		-o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=200" \
		start >"$dir/pg_ctl.log" 2>&1
	echo "export LEASEHOLD_TEST_POSTGRES='postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable'"
	echo "export LEASEHOLD_TEST_PG_BIN='$bin'"
	log "PostgreSQL on 127.0.0.1:$port ($dir)"
}

start_redis() {
	local port dir bin pid=
	bin=$(command -v redis-server)
	port=$(free_port)
	dir=$(mktemp -d /tmp/leasehold-redis.XXXXXX)
	echo "$dir" >"$STATE/redis.dir"
	"$bin" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
		--daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >"$dir/start.log" 2>&1
	for _ in $(seq 1 600); do
		if [ -s "$dir/redis.pid" ]; then
			pid=$(cat "$dir/redis.pid")
			redis-cli -p "$port" ping >/dev/null 2>&1 && break
			alive "$pid" || { log "redis-server exited"; return 1; }
		fi
		sleep 0.1
	done
	redis-cli -p "$port" ping >/dev/null
	echo "export LEASEHOLD_TEST_REDIS='redis://127.0.0.1:$port/0'"
	echo "export LEASEHOLD_TEST_REDIS_SERVER='$bin'"
	log "Redis on 127.0.0.1:$port ($dir)"
}

export_chromium() {
	local bin
	bin=$(chromium_bin)
	echo "export LEASEHOLD_TEST_CHROMIUM='$bin'"
	log "Chromium: $bin"
}

# owned PID DIR PROGRAM: whether PID is still the engine started in DIR:
# the program PROGRAM (its process name: redis-server, etcd, node for
# dynalite, postgres) whose command line names DIR, or whose working
# directory DIR is (as for Redis); not another process that was given the
# pid after the engine died. The program is checked too: a "tail -f" of
# an engine's log, a psql on its socket directory or a shell in its
# directory names DIR as well (the red team of 2026-12-06).
owned() {
	local pid=$1 dir=$2 program=$3 comm
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
	[ "$comm" = "$program" ] || return 1
	[ -r "/proc/$pid/cmdline" ] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$dir" && return 0
	[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$dir" ]
}

# made_dir KEY: prints the directory $STATE/KEY.dir names if it is one
# this script makes for KEY (mktemp -d /tmp/leasehold-KEY.XXXXXX, a real
# directory); otherwise says so, drops the state file and fails: a state
# file naming any other directory must not make stop kill or delete there.
made_dir() {
	local key=$1 dir
	dir=$(cat "$STATE/$key.dir")
	if [[ $dir =~ ^/tmp/leasehold-$key\.[A-Za-z0-9]{6}$ ]] && [ -d "$dir" ] && [ ! -L "$dir" ]; then
		echo "$dir"
		return 0
	fi
	[ ! -e "$dir" ] && [[ $dir =~ ^/tmp/leasehold-$key\.[A-Za-z0-9]{6}$ ]] ||
		log "$STATE/$key.dir names '$dir', not a directory engines.sh makes for $key: left alone"
	rm -f "$STATE/$key.dir"
	return 1
}

# proc_start PID: the start time of process PID (field 22 of its stat),
# which tells it from a later process given the same PID.
proc_start() {
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	s=${s##*) } # after the command name, which may hold spaces
	read -r -a f <<<"$s"
	echo "${f[19]}" # s starts at field 3
}

# claimer: prints the PID of the live process, other than the one this
# run is for (LEASEHOLD_ENGINES_CLAIM), that has claimed $STATE; fails when
# there is none (no claim, this run's own, or one whose process is gone).
claimer() {
	local pid start
	[ -f "$STATE/claim" ] || return 1
	read -r pid start <"$STATE/claim" 2>/dev/null || return 1
	[[ $pid =~ ^[0-9]+$ ]] && [ "$pid" != "${LEASEHOLD_ENGINES_CLAIM:-}" ] || return 1
	# A zombie (killed, its parent not yet waiting for it) is gone too:
	# the flake hunt's watchdog stops the engines of a hunt in that state
	# (the red team of 2026-12-06: refused with 75, every engine left).
	alive "$pid" && [ "$(proc_start "$pid")" = "$start" ] || return 1
	echo "$pid"
}

# refuse_claimed WHAT: exits 75 when another live process has claimed $STATE.
refuse_claimed() {
	local pid cmd
	pid=$(claimer) || return 0
	cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)
	log "refused to $1: $STATE is in use by another test command (process $pid: $cmd); give this one a directory of its own (LEASEHOLD_ENGINES_DIR=...), or wait for that one to end"
	exit 75
}

# ancestor PID: whether PID is this script or one of its ancestors (a
# test command claims the directory for itself, then runs this script).
ancestor() {
	local p=$$ s
	while [ "$p" -gt 1 ]; do
		[ "$p" = "$1" ] && return 0
		s=$(cat "/proc/$p/stat" 2>/dev/null) || return 1
		s=${s##*) }
		read -r _ p _ <<<"$s"
	done
	return 1
}

# locked CMD...: runs CMD with $STATE/claim.lock held (flock), so that two
# commands cannot both find a stale claim, drop it and claim the directory.
locked() {
	local fd
	exec {fd}>"$STATE/claim.lock"
	flock "$fd"
	"$@"
	local st=$?
	exec {fd}>&-
	return $st
}

# claim: records that $STATE belongs to the process LEASEHOLD_ENGINES_CLAIM
# names (see the header), unless another live process holds it (exit 75).
# That process must be this script or one that runs it (the test command).
claim() {
	local pid=${LEASEHOLD_ENGINES_CLAIM:-}
	[ -n "$pid" ] || return 0
	check_claim
	mkdir -p "$STATE"
	locked claim_locked "$pid" "$CLAIM_START"
}

# check_claim: exits 64 unless LEASEHOLD_ENGINES_CLAIM (when set) names this
# script or a running process that runs it; sets CLAIM_START to its start.
# Checked before anything else: a bad claim is a usage error even on a
# directory another command holds (it was refused with 75 there).
check_claim() {
	local pid=${LEASEHOLD_ENGINES_CLAIM:-} start
	CLAIM_START=
	[ -n "$pid" ] || return 0
	[[ $pid =~ ^[1-9][0-9]*$ ]] || {
		log "LEASEHOLD_ENGINES_CLAIM=$pid is not a process id"
		exit 64
	}
	start=$(proc_start "$pid") || {
		log "LEASEHOLD_ENGINES_CLAIM=$pid names no running process"
		exit 64
	}
	ancestor "$pid" || {
		log "LEASEHOLD_ENGINES_CLAIM=$pid is not this script or a process that runs it (the test command claims the directory for itself)"
		exit 64
	}
	CLAIM_START=$start
}

claim_locked() {
	refuse_claimed start # a live other claim: 75; none, ours or a stale one: (re)written
	# A claim.PID left by a writer killed before its mv (under the lock,
	# no other writer is at work).
	rm -f "$STATE"/claim.[0-9]*
	echo "$1 $2" >"$STATE/claim.$$" && mv -f "$STATE/claim.$$" "$STATE/claim" || {
		log "cannot write $STATE/claim"
		exit 1
	}
}

# unclaim: drops this run's claim (or a stale one) once its engines are stopped.
unclaim() {
	[ -f "$STATE/claim" ] || return 0
	locked unclaim_locked
}

unclaim_locked() { claimer >/dev/null || rm -f "$STATE/claim" "$STATE"/claim.[0-9]*; }

# copied: whether $STATE is a copy of another state directory (cp -a of a
# checkout copies its .engines): start records the directory's own path in
# $STATE/home; if home names another directory that exists, the engines
# its state files name are that directory's, not this one's. (A directory
# moved with mv names one that is gone: it is still the engines' own.)
copied() {
	local home here
	[ -f "$STATE/home" ] || return 1
	home=$(cat "$STATE/home")
	here=$(cd "$STATE" && pwd -P)
	[ "$home" != "$here" ] && [ -d "$home" ] && [ "$(cd "$home" && pwd -P)" != "$here" ]
}

# stop stops the engines named in $STATE, and waits until they are gone.
# stop_one KEY stops an engine that start recorded in $STATE/KEY.dir
# (dynalite, etcd, redis: one process; etcd-cluster: one per member) and
# removes its directory.
stop_one() {
	local dir pid program
	[ -f "$STATE/$1.dir" ] || return 0
	dir=$(made_dir "$1") || return 0
	case $1 in
	dynalite) program=node ;;
	redis) program=redis-server ;;
	*) program=etcd ;;
	esac
	for pid in "$dir/pid" "$dir/redis.pid" "$dir"/n[0-9].pid; do
		if [ -n "$dir" ] && [ -s "$pid" ]; then
			if owned "$(cat "$pid")" "$dir" "$program"; then
				stop_pid "$(cat "$pid")"
			elif [[ $(cat "$pid") =~ ^[0-9]+$ ]] && alive "$(cat "$pid")"; then
				log "process $(cat "$pid") (from $pid) is not this engine any more (its pid was reused): left alone"
			fi
		fi
	done
	[ -z "$dir" ] || rm -rf "$dir"
	rm -f "$STATE/$1.dir"
}

stop() {
	local dir bin pid e
	if copied; then
		log "$STATE is a copy of $(cat "$STATE/home"): the engines its state names are that directory's; left alone (only this copy's state is dropped)"
		rm -f "$STATE"/*.dir "$STATE/home"
		return 0
	fi
	if [ -f "$STATE/pg.dir" ] && dir=$(made_dir pg); then
		bin=$(pg_bin || true)
		pid=
		[ ! -s "$dir/data/postmaster.pid" ] || pid=$(head -n 1 "$dir/data/postmaster.pid")
		# Only the server started in $dir: after it died (killed, or out of
		# memory) its pid can be another process's, which neither pg_ctl
		# (it signals the pid in the file) nor stop_pid may touch.
		if [ -n "$pid" ] && ! owned "$pid" "$dir" postgres; then
			! { [[ $pid =~ ^[0-9]+$ ]] && alive "$pid"; } ||
				log "process $pid (from $dir/data/postmaster.pid) is not this PostgreSQL server any more (its pid was reused): left alone"
			pid=
		fi
		if [ -n "$pid" ]; then
			if [ -z "$bin" ]; then
				: # no pg_ctl (PostgreSQL removed meanwhile): stop_pid below
			elif as_root; then
				runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
			else
				"$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
			fi
			# pg_ctl waits for the server; should it have failed, stop it here.
			if owned "$pid" "$dir" postgres; then
				stop_pid "$pid"
			fi
		fi
		[ -z "$dir" ] || rm -rf "$dir"
		rm -f "$STATE/pg.dir"
	fi
	for e in dynalite etcd etcd-cluster redis; do
		stop_one "$e"
	done
}

case "${1:-}" in
start)
	check_claim
	mkdir -p "$STATE"
	refuse_claimed start
	claim
	rm -f "$STATE/failed"
	stop
	(cd "$STATE" && pwd -P) >"$STATE/home"
	install
	step PostgreSQL pg start_postgres
	step Redis redis start_redis
	step "dynalite (DynamoDB)" dynalite start_dynalite
	step etcd etcd start_etcd
	step "etcd cluster" etcd-cluster start_etcd_cluster
	step Chromium chromium export_chromium
	printf '%s' "$EXPORTS"
	;;
stop)
	check_claim
	refuse_claimed stop
	stop
	unclaim
	;;
etcd-member)
	shift
	etcd_member "$@"
	;;
-h | --help | help)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	;;
*)
	echo "usage: $0 start|stop|etcd-member kill|start N (--help: more)" >&2
	exit 64
	;;
esac
