#!/usr/bin/env bash
# bench/run.sh [flags of the bench program]
#
# Starts a throw-away PostgreSQL 15 (wal_level=logical, fsync and
# synchronous_commit on) in a new temporary folder on the first free port
# from 55432, runs the benchmark against it once, then stops and removes
# the server (trap EXIT). It never touches the server on 5432. As root (it
# runs the server as the OS user postgres with runuser). Flags go to the
# program: -n, -write-n, -rounds, -lat-n (see go run . -h).
set -euo pipefail
cd "$(dirname "$0")"
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PORT=${PORT:-55432}
while ss -ltnH "sport = :$PORT" | grep -q .; do PORT=$((PORT + 1)); done
for tool in initdb pg_ctl; do
	[ -x "$BIN/$tool" ] || { echo "bench: $BIN/$tool not found (PostgreSQL 15 server binaries; set PG_BIN)" >&2; exit 2; }
done
id postgres >/dev/null 2>&1 || { echo "bench: the OS user postgres is missing" >&2; exit 2; }

DIR=$(mktemp -d -t outbox-bench-pg.XXXXXX)
chown postgres:postgres "$DIR"
PGDATA=$DIR/data
pg() { (cd "$DIR" && runuser -u postgres -- "$@"); }
cleanup() {
	pg "$BIN/pg_ctl" -D "$PGDATA" stop -m fast >/dev/null 2>&1 || true
	rm -rf "$DIR"
}
trap cleanup EXIT

pg "$BIN/initdb" -D "$PGDATA" --auth=trust -U postgres -E UTF8 --locale=C >/dev/null
pg "$BIN/pg_ctl" -D "$PGDATA" -l "$DIR/server.log" -w -o "-p $PORT -c listen_addresses=127.0.0.1 \
 -c unix_socket_directories=$DIR -c wal_level=logical -c max_replication_slots=8 -c max_wal_senders=8 \
 -c fsync=on -c synchronous_commit=on -c shared_buffers=256MB -c max_connections=200" start >/dev/null

go build -o "$DIR/bench" .
echo "server: PostgreSQL 15 on 127.0.0.1:$PORT (wal_level=logical, fsync on), data in $PGDATA; $(nproc) cores" >&2
"$DIR/bench" -dsn "postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable" -pgdata "$PGDATA" "$@"
