#!/usr/bin/env bash
# Throwaway engines for the tests, on free loopback ports in temp directories.
#
#   eval "$(scripts/engines.sh start)"   installs what is missing, starts
#                                        PostgreSQL and Redis, prints exports
#   scripts/engines.sh stop              stops them by PID, removes their files
#
# Exports: LEASEHOLD_TEST_POSTGRES, LEASEHOLD_TEST_REDIS,
# LEASEHOLD_TEST_DYNAMODB (a dynalite endpoint) and LEASEHOLD_TEST_ETCD (URLs
# of the shared test servers), and LEASEHOLD_TEST_PG_BIN,
# LEASEHOLD_TEST_REDIS_SERVER, LEASEHOLD_TEST_DYNALITE and
# LEASEHOLD_TEST_ETCD_BIN (programs, for tests that start, kill and restart
# private instances), and LEASEHOLD_TEST_CHROMIUM (Debian's chromium, for the
# dashboard's browser test).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${LEASEHOLD_ENGINES_DIR:-$ROOT/.engines}

log() { echo "engines: $*" >&2; }

as_root() { [ "$(id -u)" = 0 ]; }

apt_install() {
	if ! as_root; then
		log "need $* but not root: install it yourself"
		return 1
	fi
	if [ ! -e "$STATE/.apt-updated" ]; then
		mkdir -p "$STATE"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 && touch "$STATE/.apt-updated"
	fi
	# policy-rc.d keeps the packages from starting system services of their own.
	local made=0
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
	[ "$made" = 1 ] && rm -f /usr/sbin/policy-rc.d
	return 0
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

free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % 40000))
		if ! (echo > /dev/tcp/127.0.0.1/$p) 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	log "no free port found"
	return 1
}

install() {
	local need=()
	command -v redis-server >/dev/null || need+=(redis-server)
	pg_bin >/dev/null || need+=(postgresql)
	command -v etcd >/dev/null || need+=(etcd-server)
	# ip and nft for R7's network namespaces and partitions (in /usr/sbin).
	command -v ip >/dev/null || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || need+=(iproute2)
	command -v nft >/dev/null || [ -x /usr/sbin/nft ] || need+=(nftables)
	command -v node >/dev/null || need+=(nodejs npm)
	chromium_bin >/dev/null || need+=(chromium)
	[ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"
	# From the npm registry: dynalite (MIT), a DynamoDB API on LevelDB or
	# memory; asl-validator and jsonata (the reference implementation), to
	# check the state machines that "leasehold sfn" writes.
	if [ ! -f "$NPM_DIR/node_modules/dynalite/cli.js" ] || [ ! -d "$NPM_DIR/node_modules/asl-validator" ] ||
		[ ! -d "$NPM_DIR/node_modules/jsonata" ]; then
		mkdir -p "$NPM_DIR"
		(cd "$NPM_DIR" && npm install --no-audit --no-fund --loglevel=error dynalite@4 asl-validator@4 jsonata@2 >&2)
	fi
}

NPM_DIR=${LEASEHOLD_NPM_DIR:-$STATE/npm}

wait_port() {
	for _ in $(seq 1 200); do
		(echo > /dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}

start_dynalite() {
	local port dir
	port=$(free_port)
	dir=$(mktemp -d /tmp/leasehold-dynalite.XXXXXX)
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
	echo $! > "$dir/pid"
	wait_port "$port" || { cat "$dir/dynalite.log" >&2; return 1; }
	echo "$dir" > "$STATE/dynalite.dir"
	echo "export LEASEHOLD_TEST_DYNAMODB='dynamodb://leasehold_test?endpoint=http://127.0.0.1:$port&region=us-east-1'"
	echo "export LEASEHOLD_TEST_DYNALITE='$NPM_DIR/node_modules/dynalite/cli.js'"
	echo "export LEASEHOLD_TEST_NODE_MODULES='$NPM_DIR/node_modules'"
	echo "export AWS_ACCESS_KEY_ID=\${AWS_ACCESS_KEY_ID:-test} AWS_SECRET_ACCESS_KEY=\${AWS_SECRET_ACCESS_KEY:-test}"
	log "dynalite (DynamoDB API) on 127.0.0.1:$port ($dir)"
}

start_etcd() {
	local port peer dir
	port=$(free_port)
	peer=$(free_port)
	dir=$(mktemp -d /tmp/leasehold-etcd.XXXXXX)
	nohup etcd --name leasehold-test --data-dir "$dir/data" \
		--listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
		--listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
		--initial-cluster "leasehold-test=http://127.0.0.1:$peer" >"$dir/etcd.log" 2>&1 &
	echo $! > "$dir/pid"
	wait_port "$port" || { cat "$dir/etcd.log" >&2; return 1; }
	echo "$dir" > "$STATE/etcd.dir"
	echo "export LEASEHOLD_TEST_ETCD='etcd://127.0.0.1:$port'"
	echo "export LEASEHOLD_TEST_ETCD_BIN='$(command -v etcd)'"
	log "etcd on 127.0.0.1:$port ($dir)"
}

start_postgres() {
	local bin port dir
	bin=$(pg_bin)
	port=$(free_port)
	dir=$(mktemp -d /tmp/leasehold-pg.XXXXXX)
	local run=()
	if as_root; then
		chown postgres "$dir"
		run=(runuser -u postgres --)
	fi
	"${run[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; return 1; }
	"${run[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
		-o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=200" \
		start >/dev/null || { cat "$dir/server.log" >&2; return 1; }
	echo "$dir" > "$STATE/pg.dir"
	echo "export LEASEHOLD_TEST_POSTGRES='postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable'"
	echo "export LEASEHOLD_TEST_PG_BIN='$bin'"
	log "PostgreSQL on 127.0.0.1:$port ($dir)"
}

start_redis() {
	local port dir
	port=$(free_port)
	dir=$(mktemp -d /tmp/leasehold-redis.XXXXXX)
	redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
		--daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null
	for _ in $(seq 1 100); do
		[ -s "$dir/redis.pid" ] && redis-cli -p "$port" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	redis-cli -p "$port" ping >/dev/null || { cat "$dir/redis.log" >&2; return 1; }
	echo "$dir" > "$STATE/redis.dir"
	echo "export LEASEHOLD_TEST_REDIS='redis://127.0.0.1:$port/0'"
	echo "export LEASEHOLD_TEST_REDIS_SERVER='$(command -v redis-server)'"
	log "Redis on 127.0.0.1:$port ($dir)"
}

export_chromium() {
	echo "export LEASEHOLD_TEST_CHROMIUM='$(chromium_bin)'"
	log "Chromium: $(chromium_bin)"
}

stop() {
	if [ -f "$STATE/pg.dir" ]; then
		local dir bin
		dir=$(cat "$STATE/pg.dir")
		bin=$(pg_bin || true)
		if [ -n "$bin" ] && [ -d "$dir/data" ]; then
			if as_root; then
				runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
			else
				"$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
			fi
		fi
		rm -rf "$dir" "$STATE/pg.dir"
	fi
	for e in dynalite etcd; do
		if [ -f "$STATE/$e.dir" ]; then
			local d
			d=$(cat "$STATE/$e.dir")
			[ -s "$d/pid" ] && kill "$(cat "$d/pid")" 2>/dev/null || true
			rm -rf "$d" "$STATE/$e.dir"
		fi
	done
	if [ -f "$STATE/redis.dir" ]; then
		local dir
		dir=$(cat "$STATE/redis.dir")
		[ -s "$dir/redis.pid" ] && kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
		rm -rf "$dir" "$STATE/redis.dir"
	fi
}

case "${1:-}" in
start)
	mkdir -p "$STATE"
	stop
	install
	start_postgres
	start_redis
	start_dynalite
	start_etcd
	export_chromium
	;;
stop) stop ;;
*)
	echo "usage: $0 start|stop" >&2
	exit 64
	;;
esac
