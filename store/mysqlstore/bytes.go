package mysqlstore

import (
	"context"
	"database/sql"
)

// measureFirst is how many of a claim's rows the first read of payload
// lengths measures.
const measureFirst = 16

// cutToBytes cuts take (a claim's rows to take, in id order) to the longest
// prefix whose payloads sum to at most maxBytes (driver.ClaimParams.MaxBytes),
// and never below one row; maxBytes 0 cuts nothing.
//
// A prefix in id order keeps every key's order: take holds, for each key,
// a prefix of its claimable rows, so a key's rows after one left out are
// left out too, and a later claim takes them in order, as the rows past
// Limit. InnoDB keeps a payload of more than a few hundred bytes off the
// row, and LENGTH reads it in full, so the lengths are read in pages, in
// the claim's transaction before its UPDATE: 16 rows first (a claim of a
// relay that keeps up is one page), then as many as the bytes left hold at
// the average length so far, and a quarter more. A claim of large events
// reads about the payloads it takes, not Limit of them; a claim of small
// ones reads the lengths of all its rows in two pages.
func (s *Store) cutToBytes(ctx context.Context, tx *sql.Tx, take []int64, maxBytes int64) ([]int64, error) {
	if maxBytes <= 0 || len(take) <= 1 {
		return take, nil
	}
	var sum int64
	for measured := 0; measured < len(take); {
		page := measureFirst
		if measured > 0 {
			avg := max(sum/int64(measured), 1)
			left := (maxBytes - sum) / avg
			page = int(min(int64(len(take)), left+left/4+1))
		}
		page = min(page, len(take)-measured)
		ids := take[measured : measured+page]
		rows, err := tx.QueryContext(ctx, "SELECT id, LENGTH(payload) FROM "+s.table+byID+" WHERE id IN ("+marks(len(ids))+")", appendIDs(nil, ids)...)
		if err != nil {
			return nil, wrap("payload lengths", err)
		}
		size := make(map[int64]int64, len(ids))
		for rows.Next() {
			var id, n int64
			if err := rows.Scan(&id, &n); err != nil {
				rows.Close()
				return nil, err
			}
			size[id] = n
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		// a row gone meanwhile (acked, purged) weighs nothing: the
		// claim's UPDATE passes over it
		for i, id := range ids {
			if measured+i > 0 && sum+size[id] > maxBytes {
				return take[:measured+i], nil
			}
			sum += size[id]
		}
		measured += page
	}
	return take, nil
}
