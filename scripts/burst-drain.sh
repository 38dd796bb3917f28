#!/usr/bin/env bash
# A burst after steady traffic (BENCHMARKS.md, "After the store's first
# VACUUM"): one `outbox relay` process keeps up with plain-SQL inserts
# (one psql INSERT of 100 rows every 100 ms, under 1,000 events/s) for
# 300 inserts, enough for its store to vacuum the nearly empty table
# (every 20,000 deleted rows), then 200,000 rows land in one INSERT and the
# script times the drain until none is pending (polled every 0.5 s). A
# relay that starts on a backlog (`outbox bench`) never meets the plans its
# connections made in the quiet: this one does. PostgreSQL only (psql on
# PATH); the broker is NATS JetStream (a stream BURST capturing burst.>,
# which keeps what every round published: alternate the builds you compare
# round by round, so neither always publishes into the larger stream).
#
#   OUTBOX_DB=postgres://user@host:5432/db OUTBOX_BROKER=nats://host:4222 \
#     scripts/burst-drain.sh [--bin PATH] [--rounds 3]
#
# The URLs come from the environment only, never a command line. psql
# needs the database URL on its own, so a URL with a password is refused:
# put the password in ~/.pgpass or PGPASSWORD.
set -euo pipefail
db=${OUTBOX_DB:-} broker=${OUTBOX_BROKER:-} bin="" rounds=3
while [ $# -gt 0 ]; do
	case $1 in
	--bin) bin=${2:?--bin needs a path}; shift 2 ;;
	--rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
	*) echo "burst-drain: unknown flag $1 (see the comment at the top of $0)" >&2; exit 2 ;;
	esac
done
[ -n "$db" ] && [ -n "$broker" ] || { echo "burst-drain: set OUTBOX_DB and OUTBOX_BROKER" >&2; exit 2; }
case $db in postgres://* | postgresql://*) ;; *) echo "burst-drain: OUTBOX_DB must be a postgres:// URL (the script inserts with psql)" >&2; exit 2 ;; esac
case ${db#*://} in *:*@*) echo "burst-drain: OUTBOX_DB carries a password, which psql would show in the process list: put it in ~/.pgpass or PGPASSWORD" >&2; exit 2 ;; esac
command -v psql > /dev/null || { echo "burst-drain: psql is not on PATH (Debian: apt-get install postgresql-client)" >&2; exit 2; }
[ -z "$bin" ] || bin=$(realpath "$bin")
cd "$(dirname "$0")/.."
built=""
if [ -z "$bin" ]; then
	built=$(mktemp -d)
	bin=$built/outbox
	go build -o "$bin" ./cmd/outbox
fi
export OUTBOX_DB OUTBOX_BROKER
sql() { psql -X -q -At -v ON_ERROR_STOP=1 "$db" -c "$1"; }
relay="" table=""
cleanup() {
	[ -z "$relay" ] || { kill "$relay" 2> /dev/null || true; wait "$relay" 2> /dev/null || true; }
	if [ -n "$table" ]; then
		sql "DROP TABLE IF EXISTS $table, ${table}_archive, ${table}_migrations, ${table}_claims, ${table}_shards, ${table}_relays" || true
		for d in status topic version headers type created next; do
			sql "DROP DOMAIN IF EXISTS ${table}_${d}_t" || true
		done
	fi
	relay="" table=""
}
trap 'cleanup; [ -z "$built" ] || rm -rf "$built"' EXIT
"$bin" broker setup --stream BURST --subjects 'burst.>' > /dev/null
for round in $(seq "$rounds"); do
	table=burst_$$_$round
	"$bin" migrate --table "$table" > /dev/null
	"$bin" relay --table "$table" --log-level error &
	relay=$!
	sleep 2
	for _ in $(seq 300); do # 100 rows every 100 ms, over 100 keys
		sql "INSERT INTO $table (topic, event_key, event_type, payload) SELECT 'burst.a', 'k-' || (g % 100), 'Burst', '\\x7b7d' FROM generate_series(1, 100) g"
		sleep 0.1
	done
	sleep 2
	sql "INSERT INTO $table (topic, event_key, event_type, payload) SELECT 'burst.a', 'k-' || (g % 1000), 'Burst', '\\x7b7d' FROM generate_series(1, 200000) g"
	start=$(date +%s.%N)
	while [ "$(sql "SELECT count(*) FROM $table WHERE status = 'NEW'")" != 0 ]; do
		kill -0 "$relay" 2> /dev/null || { echo "burst-drain: the relay process exited during round $round" >&2; exit 1; }
		awk "BEGIN { exit !($(date +%s.%N) - $start < 600) }" || { echo "burst-drain: round $round did not drain within 600 s" >&2; exit 1; }
		sleep 0.5
	done
	end=$(date +%s.%N)
	echo "round $round: 200,000 events drained in $(awk "BEGIN { printf \"%.2f s, %d events/s\", $end - $start, 200000 / ($end - $start) }") (1-minute load at the burst: $(cut -d' ' -f1 /proc/loadavg))"
	cleanup
done
