#!/usr/bin/env bash
# A burst after a quiet hour (BENCHMARKS.md, "A burst after steady
# traffic"): one `outbox relay` process keeps up with plain-SQL inserts at
# about 1,000 events/s for 30 s, long enough for its store to vacuum the
# nearly empty table (every 20,000 deleted rows), then 200,000 rows land in
# one INSERT and the script times the drain until none is pending. A relay
# that starts on a backlog (`outbox bench`) never meets the plans its
# connections made in the quiet: this one does. PostgreSQL only (psql on
# PATH); the broker is NATS JetStream (a stream BURST capturing burst.>).
#
#   scripts/burst-drain.sh --db postgres://… --broker nats://… [--bin PATH] [--rounds 3]
#
# The outbox commands get the URLs from OUTBOX_DB and OUTBOX_BROKER, never
# on their command lines; psql does get the database URL on its own, so
# keep the password out of it (~/.pgpass or PGPASSWORD).
set -euo pipefail
db=${OUTBOX_DB:-} broker=${OUTBOX_BROKER:-} bin="" rounds=3
while [ $# -gt 0 ]; do
	case $1 in
	--db) db=$2; shift 2 ;;
	--broker) broker=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	*) echo "burst-drain: unknown flag $1 (see the comment at the top of $0)" >&2; exit 2 ;;
	esac
done
[ -n "$db" ] && [ -n "$broker" ] || { echo "burst-drain: --db and --broker (or OUTBOX_DB, OUTBOX_BROKER) are required" >&2; exit 2; }
case $db in postgres://* | postgresql://*) ;; *) echo "burst-drain: --db must be a postgres:// URL (the script inserts with psql)" >&2; exit 2 ;; esac
command -v psql > /dev/null || { echo "burst-drain: psql is not on PATH (Debian: apt-get install postgresql-client)" >&2; exit 2; }
cd "$(dirname "$0")/.."
if [ -z "$bin" ]; then
	bin=$(mktemp -d)/outbox
	go build -o "$bin" ./cmd/outbox
fi
sql() { psql -X -q -At -v ON_ERROR_STOP=1 "$db" -c "$1"; }
export OUTBOX_DB=$db OUTBOX_BROKER=$broker
"$bin" broker setup --stream BURST --subjects 'burst.>' > /dev/null
for round in $(seq "$rounds"); do
	table=burst_$$_$round
	"$bin" migrate --table "$table" > /dev/null
	"$bin" relay --table "$table" --log-level error &
	relay=$!
	trap 'kill $relay 2> /dev/null || true' EXIT
	sleep 2
	for _ in $(seq 300); do # 30 s, 100 rows every 100 ms, over 100 keys
		sql "INSERT INTO $table (topic, event_key, event_type, payload) SELECT 'burst.a', 'k-' || (g % 100), 'Burst', '\\x7b7d' FROM generate_series(1, 100) g"
		sleep 0.1
	done
	sleep 2
	sql "INSERT INTO $table (topic, event_key, event_type, payload) SELECT 'burst.a', 'k-' || (g % 1000), 'Burst', '\\x7b7d' FROM generate_series(1, 200000) g"
	start=$(date +%s.%N)
	while [ "$(sql "SELECT count(*) FROM $table WHERE status = 'NEW'")" != 0 ]; do
		sleep 0.1
	done
	end=$(date +%s.%N)
	echo "round $round: 200,000 events drained in $(awk "BEGIN { printf \"%.2f s, %d events/s\", $end - $start, 200000 / ($end - $start) }") (1-minute load at the burst: $(cut -d' ' -f1 /proc/loadavg))"
	kill "$relay"
	wait "$relay" 2> /dev/null || true
	sql "DROP TABLE IF EXISTS $table, ${table}_archive, ${table}_migrations, ${table}_claims, ${table}_shards, ${table}_relays"
	for d in status topic version headers type created next; do
		sql "DROP DOMAIN IF EXISTS ${table}_${d}_t"
	done
done
