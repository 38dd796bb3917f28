#!/usr/bin/env bash
# The engine's key × relay sweep (BENCHMARKS.md, "Where the drain's CPU
# goes"): `outbox bench` drains a pre-filled backlog with separate
# `outbox relay` processes for each cell, ROUNDS times (cells interleaved,
# so that the machine's load spreads over all of them), and prints each
# run and each cell's medians: the drain rate, its share of the raw SQL
# claim+delete rate measured in the same run, and its share of the
# 100,000-key cell of the same relay count (by rate, and by the share of
# raw SQL, which takes the load of the moment out).
#
#   scripts/bench-sweep.sh --db postgres://… --broker nats://… [--events 200000]
#     [--rounds 3] [--keys "1 10 100 1000 100000"] [--relays "1 3"] [-- extra bench flags]
set -euo pipefail
db=${OUTBOX_DB:-} broker=${OUTBOX_BROKER:-} events=200000 rounds=3
keys="1 10 100 1000 100000" relays="1 3" extra=()
while [ $# -gt 0 ]; do
	case $1 in
	--db) db=$2; shift 2 ;;
	--broker) broker=$2; shift 2 ;;
	--events) events=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	--keys) keys=$2; shift 2 ;;
	--relays) relays=$2; shift 2 ;;
	--) shift; extra=("$@"); break ;;
	*) echo "bench-sweep: unknown flag $1 (see the comment at the top of $0)" >&2; exit 2 ;;
	esac
done
[ -n "$db" ] && [ -n "$broker" ] || { echo "bench-sweep: --db and --broker (or OUTBOX_DB, OUTBOX_BROKER) are required" >&2; exit 2; }
cd "$(dirname "$0")/.."
bin=$(mktemp -d)/outbox
go build -o "$bin" ./cmd/outbox
out=$(mktemp)
export OUTBOX_DB=$db OUTBOX_BROKER=$broker # through the environment: ps shows arguments
for round in $(seq "$rounds"); do
	for r in $relays; do
		for k in $keys; do
			line=$("$bin" bench --events "$events" --keys "$k" --relays "$r" --duration 1s --rate 200 \
				--table "sweep_k${k}_r${r}" "${extra[@]}" 2>&1 | grep 'relay processes' || true)
			drain=$(sed -n 's/.*drain \([0-9]*\) ev\/s.*/\1/p' <<<"$line")
			raw=$(sed -n 's/.*claim+delete (\([0-9]*\) rows\/s).*/\1/p' <<<"$line")
			load=$(cut -d' ' -f1 /proc/loadavg)
			echo "round $round relays $r keys $k: drain ${drain:-failed} ev/s, raw SQL ${raw:-?} rows/s, load $load"
			echo "$r $k ${drain:-0} ${raw:-0}" >>"$out"
		done
	done
done
echo
echo "| keys | relays | drain, median (ev/s) | % of raw SQL, median | vs the 100,000-key cell: by rate | by % of raw SQL |"
echo "|---|---|---|---|---|---|"
python3 - "$out" "$keys" "$relays" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
keys, relays = sys.argv[2].split(), sys.argv[3].split()
med = {}
for r in relays:
    for k in keys:
        runs = [(int(d), int(w)) for rr, kk, d, w in rows if rr == r and kk == k]
        d = st.median([x for x, _ in runs])
        pct = st.median([100 * x / w for x, w in runs if w]) if any(w for _, w in runs) else 0
        med[r, k] = (d, pct)
for r in relays:
    for k in keys:
        d, pct = med[r, k]
        ref, refpct = med.get((r, "100000"), (0, 0))
        share = f"{100 * d / ref:.0f} %" if ref else "-"
        norm = f"{100 * pct / refpct:.0f} %" if refpct else "-"
        print(f"| {int(k):,} | {r} | {d:,.0f} | {pct:.0f} % | {share} | {norm} |")
PY
