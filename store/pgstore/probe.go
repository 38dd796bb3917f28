package pgstore

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// commitProbe is the state the commit probe shares with the listener and
// the claims: the newest id seen, and the shards this Store's relays hold.
type commitProbe struct {
	// last is the newest id the probe has seen or heard of from another
	// relay's probe (-1 before the first look).
	last atomic.Int64
	// held is the union of the shards named by each owner's last claim
	// (bit i: shard i), 0 while no claim has run; owners maps each owner
	// to its own mask.
	held   atomic.Uint64
	owners sync.Map // owner → uint64
	// id tells this Store's forwarded probe results from other relays'.
	id string
}

// raise sets the newest id seen to id when id is newer.
func (p *commitProbe) raise(id int64) {
	for {
		cur := p.last.Load()
		if id <= cur || p.last.CompareAndSwap(cur, id) {
			return
		}
	}
}

// hold records the shards an owner's claim named.
func (p *commitProbe) hold(owner string, shards []int) {
	var m uint64
	for _, sh := range shards {
		m |= 1 << uint(sh)
	}
	if old, ok := p.owners.Load(owner); ok && old.(uint64) == m {
		return
	}
	p.owners.Store(owner, m)
	var all uint64
	p.owners.Range(func(_, v any) bool { all |= v.(uint64); return true })
	p.held.Store(all)
}

// mine returns the shards of mask this Store's relays hold (all of mask
// before any claim told which they hold).
func (p *commitProbe) mine(mask uint64) uint64 {
	if h := p.held.Load(); h != 0 {
		return mask & h
	}
	return mask
}

// probe signals soon after events are committed, until ctx ends. It finds
// the commits of producers that send no notification (plain SQL), which
// LISTEN never hears of. Every probeEvery it asks for an id above the
// newest it has seen (probeSQL: it reads only the rows inserted since, so
// its cost grows neither with the backlog nor with the rows deleted since
// the last VACUUM), with the shards of those rows.
//
// Only the relay that holds a shard claims its rows, so each relay's
// probe would serve only its own shards, and a commit would wait for its
// owner's next look: with two relays, twice as long on average as when
// either look serves. So a probe that finds new rows signals this
// process only for the shards its relays hold, and forwards the rest to
// the other relays in one notification on the table's channel (the
// newest id and the shards). A relay hearing it wakes when it holds one
// of them, and counts those ids as seen, so its own probe does not wake
// it for them again. Every relay's probe then serves every relay.
//
// Ids are drawn at INSERT and committed out of order, so a commit can
// land below an id already seen, and below rows that stay in the table
// (DEAD, waiting for a retry, held behind their key), so that no max over
// the table changes either. The relay's look again shortly after each
// wake-up covers a commit landing within milliseconds of the other; for
// the rest, every writersEvery the probe lists the transactions that hold
// a write lock on the table (writersSQL, from pg_locks: an INSERT holds
// one until its transaction ends) and signals when one it saw before is
// gone: it committed (or rolled back, a wake-up for nothing). So a
// producer's transaction that was open at one of those looks is found
// within writersEvery of its commit, wherever its id lies; one that began
// and committed between two looks, below an id already seen, is found by
// the relay's poll. Where pg_locks cannot be read, the probe reads the
// table's newest id instead (fullProbeSQL) and signals when it changed.
// Once a second it checks the id sequence for a restart (TRUNCATE …
// RESTART IDENTITY), after which nothing would be above the newest seen.
func (s *Store) probe(ctx context.Context) {
	defer s.background.Done()
	q, full := s.probeSQL(), s.fullProbeSQL()
	lastFull := int64(-1)
	var writers []string // the write-lock holders seen at the last look; nil before the first
	lastSeq := int64(-1) // the id sequence at the last restart check
	n := 0
	fullEvery := max(int(writersEvery/s.probeEvery), 1)
	restartEvery := max(int(time.Second/s.probeEvery), 1)
	t := time.NewTicker(s.probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n++
		last := s.probeState.last.Load()
		if n == 1 || n%restartEvery == 0 && last > 0 {
			// A restart sets the sequence back below the newest id
			// seen. Ids above the sequence (a row inserted with an
			// explicit id, a copy without setval) are no restart: once
			// the sequence has been read, only its going back is.
			var seq *int64
			if err := s.pool.QueryRow(ctx, restartSQL, s.table).Scan(&seq); err == nil && seq != nil {
				if last > 0 && *seq < last && (lastSeq < 0 || *seq < lastSeq) {
					s.probeState.last.Store(0)
					last = 0
				}
				lastSeq = *seq
			}
		}
		var newest, mask int64
		if err := s.pool.QueryRow(ctx, q, last).Scan(&newest, &mask); err != nil {
			continue // the relay polls meanwhile
		}
		if newest > last {
			if last >= 0 {
				s.probed(ctx, newest, uint64(mask))
			}
			s.probeState.raise(newest)
		}
		if n%fullEvery == 0 {
			var now []string
			if err := s.pool.QueryRow(ctx, writersSQL, s.table).Scan(&now); err == nil {
				slices.Sort(now)
				if writerEnded(writers, now) {
					s.signal()
				}
				writers = now
				continue
			}
			var top int64
			if err := s.pool.QueryRow(ctx, full).Scan(&top); err != nil {
				continue
			}
			if lastFull >= 0 && top != lastFull && top > 0 {
				s.signal() // (a table drained empty is no news)
			}
			lastFull = top
		}
	}
}

// probed acts on new rows up to id newest in the shards of mask: it
// signals this process for its own shards and forwards the others.
func (s *Store) probed(ctx context.Context, newest int64, mask uint64) {
	if s.probeState.mine(mask) != 0 {
		s.signal()
	}
	if mask&^s.probeState.mine(mask) != 0 {
		_, _ = s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", s.channel, probePayload(s.probeState.id, newest, mask))
	}
}

// probePrefix starts a forwarded probe result on the table's channel:
// "probe:<sender> <newest id> <shard mask>".
const probePrefix = "probe:"

func probePayload(sender string, newest int64, mask uint64) string {
	return probePrefix + sender + " " + strconv.FormatInt(newest, 10) + " " + strconv.FormatUint(mask, 10)
}

// heard acts on a forwarded probe result (payload without probePrefix):
// another relay's probe found new rows up to an id in some shards. It
// reports whether the payload was one.
func (s *Store) heard(payload string) bool {
	f := strings.Fields(payload)
	if len(f) != 3 {
		return false
	}
	newest, err1 := strconv.ParseInt(f[1], 10, 64)
	mask, err2 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	if f[0] == s.probeState.id {
		return true // this Store's own: acted on when it was sent
	}
	s.probeState.raise(newest)
	if s.probeState.mine(mask) != 0 {
		s.signal()
	}
	return true
}

// probeBatch bounds the new rows one probe reads for their shards; past
// it, the probe reports every shard (a burst: the relays are busy anyway).
const probeBatch = 256

// probeSQL returns the newest id above $1 ($1 itself, or 0, when there is
// none) and the mask of the shards of the rows above $1 (every shard when
// there are more than probeBatch). A max over the whole index walks, when
// the table is empty (a relay that keeps up), backwards over every row
// deleted since the last VACUUM, each a heap fetch (measured at a steady
// 1,000 events/s: 8,700 of them, 2 ms, every 5 ms in each relay); above
// the newest id seen there are only the rows inserted since.
func (s *Store) probeSQL() string {
	b := strconv.Itoa(probeBatch)
	return "SELECT (SELECT COALESCE(max(id), GREATEST($1::bigint, 0)) FROM " + s.table + " WHERE id > $1), " +
		"(SELECT CASE WHEN count(*) = " + b + " THEN -1 ELSE COALESCE(bit_or(1::bigint << sh::int), 0) END FROM " +
		"(SELECT " + shardExpr("") + " AS sh FROM " + s.table + " WHERE id > $1 ORDER BY id LIMIT " + b + ") n)"
}

// fullProbeSQL returns the table's newest id (0 when it is empty): the
// walk probeSQL avoids, made every writersEvery only, and only where
// writersSQL fails.
func (s *Store) fullProbeSQL() string {
	return "SELECT COALESCE(max(id), 0) FROM " + s.table
}
