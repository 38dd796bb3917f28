package torture

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
)

// payload is what each event carries: the aggregate, the version its
// transaction gave it, and a nonce so two runs never produce the same bytes.
type payload struct {
	Agg   string `json:"agg"`
	V     int64  `json:"v"`
	Nonce string `json:"nonce"`
}

func hashOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:16])
}

// writers run the business transactions: each bumps an aggregate's version,
// enqueues the event with that version and writes the ledger row, all in
// one transaction; a share is rolled back after enqueueing, a share is held
// open while others commit.
type writers struct {
	db       *sql.DB
	st       store.Store
	t        tables
	topic    string
	keys     int
	rollback float64
	hold     float64
	holdMax  time.Duration
	timeout  time.Duration
	pace     time.Duration // mean pause between a writer's transactions

	mu       sync.Mutex
	outcomes map[string]Outcome
	errs     map[string]int // first words of errors, for the report
}

func (w *writers) run(ctx context.Context, n int, seed uint64) {
	w.outcomes = map[string]Outcome{}
	w.errs = map[string]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i+1)))
			for ctx.Err() == nil {
				id, o, err := w.once(ctx, rng)
				if ctx.Err() != nil && o == Aborted {
					return // the run ended mid-transaction: nothing committed
				}
				w.mu.Lock()
				if id != "" {
					w.outcomes[id] = o
				}
				if err != nil {
					w.errs[errWords(err)]++
				}
				w.mu.Unlock()
				sleep(ctx, time.Duration(rng.Int64N(int64(2*w.pace)+1)))
			}
		}()
	}
	wg.Wait()
}

// once runs one transaction and returns its event id and what the client
// saw.
func (w *writers) once(ctx context.Context, rng *rand.Rand) (string, Outcome, error) {
	agg := aggID(rng.IntN(w.keys))
	nonce := make([]byte, 8)
	for i := range nonce {
		nonce[i] = byte(rng.Uint32())
	}
	rollback := rng.Float64() < w.rollback
	var hold time.Duration
	if rng.Float64() < w.hold {
		hold = w.holdMax/4 + time.Duration(rng.Int64N(int64(w.holdMax*3/4)+1))
	}
	tctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	tx, err := w.db.BeginTx(tctx, nil)
	if err != nil {
		return "", Aborted, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var version int64
	if w.t.dialect == "mysql" { // MariaDB has no UPDATE … RETURNING
		if _, err := tx.ExecContext(tctx, "UPDATE "+w.t.agg()+" SET version = version + 1 WHERE id = ?", agg); err != nil {
			return "", Aborted, err
		}
		err = tx.QueryRowContext(tctx, "SELECT version FROM "+w.t.agg()+" WHERE id = ?", agg).Scan(&version)
	} else {
		err = tx.QueryRowContext(tctx, w.t.rebind("UPDATE "+w.t.agg()+" SET version = version + 1 WHERE id = ? RETURNING version"), agg).Scan(&version)
	}
	if err != nil {
		return "", Aborted, err
	}
	body, _ := json.Marshal(payload{Agg: agg, V: version, Nonce: hex.EncodeToString(nonce)})
	id := outbox.NewEventID()
	if err := w.st.EnqueueTx(tctx, tx, outbox.Message{EventID: id, Topic: w.topic, Key: agg, Type: "Bumped", AggregateType: "Agg", Payload: body}); err != nil {
		return id, Aborted, err
	}
	if _, err := tx.ExecContext(tctx, w.t.rebind("INSERT INTO "+w.t.ledger()+" (event_id, agg_id, version, hash) VALUES (?, ?, ?, ?)"), id, agg, version, hashOf(body)); err != nil {
		return id, Aborted, err
	}
	if hold > 0 {
		sleep(tctx, hold) // later transactions commit first
	}
	if rollback {
		if err := tx.Rollback(); err != nil {
			return id, Aborted, err
		}
		return id, RolledBack, nil
	}
	if tctx.Err() != nil {
		return id, Aborted, tctx.Err() // database/sql rolls back a transaction whose context ended
	}
	if err := tx.Commit(); err != nil {
		return id, Unknown, err
	}
	return id, Committed, nil
}

func (w *writers) snapshot() (map[string]Outcome, map[string]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	o := make(map[string]Outcome, len(w.outcomes))
	for k, v := range w.outcomes {
		o[k] = v
	}
	e := make(map[string]int, len(w.errs))
	for k, v := range w.errs {
		e[k] = v
	}
	return o, e
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// errWords shortens an error to its first words, to count kinds of errors.
func errWords(err error) string {
	s := err.Error()
	if len(s) > 60 {
		s = s[:60]
	}
	return fmt.Sprint(s)
}
