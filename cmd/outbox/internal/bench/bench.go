// Package bench measures delivery against the limits of the same machine in
// the same run: the raw SQL claim-and-delete rate of the database and the raw
// publish rate of the broker, then the relay's drain rate and its
// commit-to-broker-ack latency at a steady rate. Every figure is reported
// next to the limit it should be read against, because the machine is shared
// and absolute numbers drift from run to run.
package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime/pprof"
	"sort"
	"sync"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// Config says what to measure.
type Config struct {
	DBURL string // --db
	// BrokerURL is --broker: nats://…, kafka://host:9092[,host2…], or
	// kfake: an in-process Kafka-protocol cluster from franz-go's kfake,
	// started for the run on 127.0.0.1, for machines without Kafka (its
	// CPU is this process's, so the report names it on every line with a
	// figure through it).
	BrokerURL string
	// Partitions is the partitions of a Kafka run's topics (created
	// fresh for the run and deleted after it); default DefaultPartitions.
	// NATS ignores it.
	Partitions int
	Events     int           // backlog size for the drain; default 100,000
	Batch      int           // relay batch size; default 1,000
	Workers    int           // relay workers; default 3
	Rate       int           // events/s for the latency run; default 1,000
	Duration   time.Duration // latency run length; default 10s
	// Warmup is load at Rate before the measured Duration, so that relay
	// start-up (and the shards' first hand-over to a relay that joined) is reported apart from the steady state; 0: none.
	Warmup  time.Duration
	Payload int       // payload bytes; default 200
	Out     io.Writer // progress and results
	// CPUProfile, when set, receives a pprof CPU profile of the drain phase
	// (this process only: the relay, the adapter and the database driver).
	CPUProfile io.Writer
	// Keys is how many distinct event keys the backlog and the latency
	// run spread over; default 5,000. Hot aggregates (1, 10, 100 keys) are
	// the common case in production, and order per key bounds what a
	// relay may send at once.
	Keys int
	// Relays, when above 0, runs that many separate `outbox relay`
	// processes (through RelayCommand) for the drain and the latency run,
	// as users deploy them; 0 (the default) runs one relay in this process.
	Relays int
	// RelayArgs are extra flags for each relay process (e.g. --poll 10ms).
	RelayArgs []string
	// RelayCommand builds the command that runs `outbox <args>`; required
	// when Relays > 0 (the CLI passes its own executable).
	RelayCommand func(ctx context.Context, args []string) *exec.Cmd
	// Producer is how the latency run's writers enqueue: "library" (the
	// store's Enqueue, which notifies the relay on PostgreSQL) or "sql"
	// (a plain INSERT of the table contract's columns, as a producer in
	// another language would write it: no notification). Default library.
	Producer string
	// History and Dead are rows written before the drain, as a table
	// carries them after months in production: History archived events
	// (the archive table --keep-sent fills), Dead DEAD rows in the outbox
	// table on keys the drain does not use. Default none.
	History, Dead int
	// KeepSent makes the relay archive what it delivers (store.Options's
	// KeepSent; relay processes get --keep-sent 24h), as History's rows
	// were.
	KeepSent bool
	// DrainOnly skips the latency run (a sweep of the drain).
	DrainOnly bool
	// OpenStore and SQLDB open the database (injected so this package does
	// not import every store).
	OpenStore func(ctx context.Context, url string, opts store.Options) (driver.Store, error)
	SQLDB     func(url string) (*sql.DB, string, error) // db, dialect ("postgres", "mysql", "sqlite")
}

// Result holds every figure of one run.
type Result struct {
	RawSQLRate    float64 // rows/s, claim-and-delete in batches, one connection
	RawBrokerRate float64 // msgs/s through the adapter, batches of Batch
	DrainRate     float64 // events/s, relay, backlog of Events
	// NaiveRate is events/s of the naive relay (naiveDrain) on the same
	// backlog, with NaiveWorkers transactions in parallel: the limit the
	// drain is read against.
	NaiveRate    float64
	NaiveWorkers int
	// DrainUsage is what the relay used during the drain: the relay
	// processes, or with an in-process relay this whole process.
	DrainUsage   Usage
	LatencyP50   time.Duration
	LatencyP95   time.Duration
	LatencyP99   time.Duration
	LatencyMax   time.Duration
	LatencyCount int
	AchievedRate float64
	// LatencyAt says where latency ends: "broker ack" with an in-process
	// relay, "consumer receipt" with relay processes (the ack happens in
	// another process; receipt from JetStream comes just after it, so
	// this is an upper bound of commit → ack).
	LatencyAt string
	// FloorP50 and FloorP99 are the machine's floor for that latency,
	// sampled every 5 ms during the latency run: one database round trip
	// (SELECT 1) followed by one publish and its ack (FloorAt: a
	// JetStream publish, a synchronous Kafka produce). A relay
	// needs at least that (a claim, a publish) after it learned of a
	// commit, so on a loaded machine LatencyP99 is read against FloorP99.
	FloorP50, FloorP99 time.Duration
	// WarmupP99 and WarmupMax are the latency of the Warmup's events.
	WarmupP99, WarmupMax time.Duration
	// Broker names what was measured: "NATS JetStream", "Kafka" or
	// KfakeLabel; Partitions is the Kafka topics' (0 for NATS); FloorAt
	// is the floor's publish.
	Broker     string
	Partitions int
	FloorAt    string
}

// on is how a report line names a Kafka run's broker ("" for NATS, whose
// lines predate Kafka and stay as they were).
func (r Result) on(lead string) string {
	if r.Partitions == 0 {
		return ""
	}
	return lead + r.Broker
}

// Summary is the one-line form, ratios included.
func (r Result) Summary(c Config) string {
	relays := "1 relay in process"
	if c.Relays > 0 {
		relays = plural(c.Relays, "relay process")
	}
	on := ""
	if r.Partitions > 0 {
		on = fmt.Sprintf(", %s with %d partitions", r.Broker, r.Partitions)
	}
	floor := r.FloorAt
	if floor == "" {
		floor = "1 JetStream publish"
	}
	return fmt.Sprintf("bench: %s, %d keys, %s producer%s: drain %.0f ev/s = %.2f × the naive relay (%.0f ev/s), %.0f%% of raw SQL claim+delete (%.0f rows/s) and %.0f%% of raw broker publish (%.0f msgs/s); latency commit→%s at %.0f ev/s: p50 %s p95 %s p99 %s max %s (n=%d); floor (1 SQL round trip + %s, same minutes): p50 %s p99 %s; warm-up p99 %s",
		relays, c.Keys, c.Producer, on, r.DrainRate, r.DrainRate/r.NaiveRate, r.NaiveRate, 100*r.DrainRate/r.RawSQLRate, r.RawSQLRate, 100*r.DrainRate/r.RawBrokerRate, r.RawBrokerRate,
		r.LatencyAt, r.AchievedRate, r.LatencyP50.Round(10*time.Microsecond), r.LatencyP95.Round(10*time.Microsecond), r.LatencyP99.Round(10*time.Microsecond), r.LatencyMax.Round(10*time.Microsecond), r.LatencyCount, floor, r.FloorP50.Round(10*time.Microsecond), r.FloorP99.Round(10*time.Microsecond), r.WarmupP99.Round(10*time.Microsecond))
}

// WithDefaults returns c with the default in every zero field.
func (c Config) WithDefaults() Config {
	if c.Events <= 0 {
		c.Events = 100_000
	}
	if c.Batch <= 0 {
		c.Batch = 1000
	}
	if c.Workers <= 0 {
		c.Workers = 3
	}
	if c.Rate <= 0 {
		c.Rate = 1000
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Payload <= 0 {
		c.Payload = 200
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Keys <= 0 {
		c.Keys = 5000
	}
	if c.Producer == "" {
		c.Producer = "library"
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	return c
}

// validate refuses a run WithDefaults could not complete.
func (c Config) validate() error {
	if c.Producer != "library" && c.Producer != "sql" {
		return fmt.Errorf("bench: the producer must be library or sql, not %q", c.Producer)
	}
	if c.Relays < 0 {
		return fmt.Errorf("bench: the number of relay processes must not be negative, not %d", c.Relays)
	}
	if c.Relays > 0 && c.RelayCommand == nil {
		return errors.New("bench: RelayCommand is required with Relays > 0")
	}
	if c.OpenStore == nil || c.SQLDB == nil {
		return errors.New("bench: OpenStore and SQLDB are required")
	}
	if brokerKind(c.BrokerURL) == "" {
		return unsupported(c.BrokerURL)
	}
	if c.History < 0 || c.Dead < 0 {
		return fmt.Errorf("bench: the history's archived and DEAD rows must not be negative, not %d and %d", c.History, c.Dead)
	}
	if c.Partitions < 0 {
		return fmt.Errorf("bench: the number of partitions must not be negative, not %d", c.Partitions)
	}
	return nil
}

// Run performs the whole measurement on fresh tables and a fresh stream,
// removing both afterwards.
func Run(ctx context.Context, c Config) (Result, error) {
	var res Result
	c = c.WithDefaults()
	if err := c.validate(); err != nil {
		return res, err
	}
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000_000)
	opts := store.Options{Table: "outbox_bench_" + suffix, KeepSent: c.KeepSent}
	sc, err := openScratch(ctx, c.DBURL, opts, c.OpenStore, c.SQLDB)
	if err != nil {
		return res, err
	}
	defer sc.close()
	st, db, dialect := sc.st, sc.db, sc.dialect
	dest, err := openDestination(ctx, c, suffix, &res)
	if err != nil {
		return res, err
	}
	defer dest.close()
	if res.Partitions > 0 {
		fmt.Fprintf(c.Out, "bench: %s at %s: topics %s and %s of %d partitions, %s of 1, deleted after the run\n", res.Broker, redact.URL(dest.relayURL()),
			dest.topic("orders"), dest.topic("latency"), res.Partitions, dest.topic("floor"))
	}
	br, err := dest.dial()
	if err != nil {
		return res, err
	}
	defer br.Close(context.Background())

	msgs := makeMessages(c, dest.topic("orders"))
	// 1. The database's limit: claim-and-delete in raw SQL.
	fmt.Fprintf(c.Out, "bench: filling %d events …\n", c.Events)
	if err := fill(ctx, st, msgs); err != nil {
		return res, err
	}
	if err := analyze(ctx, db, dialect, opts.Table); err != nil {
		return res, err
	}
	res.RawSQLRate, err = rawDrain(ctx, db, dialect, opts.Table, c.Batch, c.Events)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(c.Out, "bench: raw SQL claim+delete, batches of %d, one connection: %.0f rows/s\n", c.Batch, res.RawSQLRate)

	// 2. The broker's limit through the same adapter.
	res.RawBrokerRate, err = rawPublish(ctx, br, msgs, c.Batch)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(c.Out, "bench: raw broker publish through the adapter%s, batches of %d: %.0f msgs/s\n", res.on(" to "), c.Batch, res.RawBrokerRate)

	// 3. The relay drains the same backlog, from the same state of the
	// table: the raw drain started on a fresh table, so the dead rows it
	// left are vacuumed away first (PostgreSQL; elsewhere this is a no-op).
	if err := vacuum(ctx, db, dialect, opts.Table); err != nil {
		return res, err
	}
	if c.History > 0 || c.Dead > 0 {
		began := time.Now()
		if err := seedHistory(ctx, db, dialect, opts.Table, c.History, c.Dead, c.Payload); err != nil {
			return res, err
		}
		fmt.Fprintf(c.Out, "bench: history: %d archived events and %d DEAD rows written in %s\n", c.History, c.Dead, time.Since(began).Round(100*time.Millisecond))
	}
	if err := refill(ctx, st, msgs); err != nil {
		return res, err
	}
	if err := analyze(ctx, db, dialect, opts.Table); err != nil {
		return res, err
	}
	fmt.Fprintf(c.Out, "bench: refilled %d events\n", c.Events)
	if c.CPUProfile != nil {
		if err := pprof.StartCPUProfile(c.CPUProfile); err != nil {
			return res, fmt.Errorf("bench: cpu profile: %w", err)
		}
	}
	if c.Relays > 0 {
		res.DrainRate, res.DrainUsage, err = drainByProcesses(ctx, st, dest, c, opts.Table, "drain by "+plural(c.Relays, "relay process")+res.on(" to "))
	} else {
		res.DrainRate, res.DrainUsage, err = drain(ctx, st, br, c, "drain by the relay in process"+res.on(" to "))
	}
	if c.CPUProfile != nil {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return res, err
	}
	fmt.Fprintf(c.Out, "bench: relay drain of %d events%s: %.0f ev/s (%.0f%% of raw SQL); %s: %s, %.2f CPU s per 100,000 events\n", c.Events, res.on(" to "), res.DrainRate, 100*res.DrainRate/res.RawSQLRate,
		res.usedBy(c), res.DrainUsage, res.DrainUsage.CPU*100_000/float64(c.Events))

	// 3b. The naive relay drains the same backlog again, from the same
	// state of the table, with as many transactions in parallel as the
	// relays have workers.
	if err := vacuum(ctx, db, dialect, opts.Table); err != nil {
		return res, err
	}
	if err := refill(ctx, st, msgs); err != nil {
		return res, err
	}
	if err := analyze(ctx, db, dialect, opts.Table); err != nil {
		return res, err
	}
	res.NaiveWorkers = c.Workers * max(c.Relays, 1)
	res.NaiveRate, err = naiveDrain(ctx, db, dialect, opts.Table, br, res.NaiveWorkers, c.Batch, c.Events, c.Out,
		fmt.Sprintf("naive relay (%d transactions)%s", res.NaiveWorkers, res.on(" to ")))
	if err != nil {
		return res, err
	}
	fmt.Fprintf(c.Out, "bench: naive relay (%d transactions of %d rows, SKIP LOCKED, no order, no fencing) on the same backlog%s: %.0f ev/s; relay drain = %.2f × naive relay\n", res.NaiveWorkers, c.Batch, res.on(" to "), res.NaiveRate, res.DrainRate/res.NaiveRate)
	if c.DrainOnly {
		return res, nil
	}

	// 4. Latency at a steady rate. The producers write through a store of
	// their own (its own pool, no in-process signal to the relay), so the
	// relay learns of their commits the way it would from another process:
	// LISTEN/NOTIFY, or polling where the store has no notifications.
	producers, err := c.OpenStore(ctx, c.DBURL, opts)
	if err != nil {
		return res, err
	}
	defer producers.Close()
	produce := func(ctx context.Context, m outbox.Message) error { return producers.Enqueue(ctx, m) }
	if c.Producer == "sql" {
		produce = plainSQLProducer(db, dialect, opts.Table)
	}
	fctx, stopFloor := context.WithCancel(ctx)
	floorDone := make(chan []time.Duration, 1)
	go func() { floorDone <- sampleFloor(fctx, db, dest.publishOne) }()
	if c.Relays > 0 {
		err = latencyByProcesses(ctx, dest, c, opts.Table, produce, &res)
	} else {
		err = latency(ctx, st, produce, br, c, dest.topic("latency"), &res)
	}
	stopFloor()
	if floor := <-floorDone; len(floor) > 0 {
		res.FloorP50, res.FloorP99 = floor[len(floor)/2], floor[len(floor)*99/100]
	}
	if err != nil {
		return res, err
	}
	fmt.Fprintf(c.Out, "bench: latency commit→%s%s at %.0f ev/s: p50 %s, p95 %s, p99 %s, max %s; floor p50 %s, p99 %s; warm-up (%s before) p99 %s, max %s\n", res.LatencyAt, res.on(", "), res.AchievedRate, res.LatencyP50, res.LatencyP95, res.LatencyP99, res.LatencyMax, res.FloorP50, res.FloorP99, c.Warmup, res.WarmupP99, res.WarmupMax)
	return res, nil
}

func makeMessages(c Config, topic string) []outbox.Message {
	payload := payloadOf(c.Payload)
	msgs := make([]outbox.Message, c.Events)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: topic, Key: fmt.Sprintf("order-%d", i%c.Keys), Type: "OrderPaid", Payload: payload}
	}
	return msgs
}

// refill enqueues msgs again under new event ids (JetStream would dedup
// the old ones; Kafka would not).
func refill(ctx context.Context, st driver.Store, msgs []outbox.Message) error {
	for i := range msgs {
		msgs[i].EventID = ""
	}
	return fill(ctx, st, msgs)
}

func fill(ctx context.Context, st driver.Store, msgs []outbox.Message) error {
	for i := 0; i < len(msgs); i += 5000 {
		if err := st.Enqueue(ctx, msgs[i:min(i+5000, len(msgs))]...); err != nil {
			return err
		}
	}
	return nil
}

// rawDrain claims-and-deletes every row with plain SQL, the way a hand
// written poller would, and returns rows/s.
func rawDrain(ctx context.Context, db *sql.DB, dialect, table string, batch, want int) (float64, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	start := time.Now()
	done := 0
	for done < want {
		var n int64
		switch dialect {
		case "postgres":
			rows, err := conn.QueryContext(ctx, "DELETE FROM "+table+" WHERE id IN (SELECT id FROM "+table+" WHERE status = 'NEW' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id, event_id, topic, event_key, payload, headers", batch)
			if err != nil {
				return 0, err
			}
			for rows.Next() {
				n++
			}
			rows.Close()
		case "sqlite":
			rows, err := conn.QueryContext(ctx, "DELETE FROM "+table+" WHERE id IN (SELECT id FROM "+table+" WHERE status = 'NEW' ORDER BY id LIMIT ?) RETURNING id, event_id, topic, event_key, payload, headers", batch)
			if err != nil {
				return 0, err
			}
			for rows.Next() {
				n++
			}
			rows.Close()
		case "mysql":
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				return 0, err
			}
			rows, err := tx.QueryContext(ctx, "SELECT id, event_id, topic, event_key, payload, headers FROM "+table+" WHERE status = 'NEW' ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED", batch)
			if err != nil {
				tx.Rollback()
				return 0, err
			}
			var last int64
			for rows.Next() {
				var id int64
				var a, b, k, h string
				var p []byte
				if err := rows.Scan(&id, &a, &b, &k, &p, &h); err != nil {
					rows.Close()
					tx.Rollback()
					return 0, err
				}
				last = id
				n++
			}
			rows.Close()
			if _, err := tx.ExecContext(ctx, "DELETE FROM "+table+" WHERE status = 'NEW' AND id <= ? ORDER BY id LIMIT ?", last, batch); err != nil {
				tx.Rollback()
				return 0, err
			}
			if err := tx.Commit(); err != nil {
				return 0, err
			}
		default:
			return 0, fmt.Errorf("bench: no raw drain for %s", dialect)
		}
		if n == 0 {
			return 0, fmt.Errorf("bench: raw drain found only %d of %d rows", done, want)
		}
		done += int(n)
	}
	return float64(done) / time.Since(start).Seconds(), nil
}

// vacuum removes the dead rows of table on PostgreSQL.
func vacuum(ctx context.Context, db *sql.DB, dialect, table string) error {
	if dialect != "postgres" {
		return nil
	}
	if _, err := db.ExecContext(ctx, "VACUUM "+table); err != nil {
		return fmt.Errorf("bench: vacuum after the raw drain: %w", err)
	}
	return nil
}

// analyze gives PostgreSQL statistics of the backlog just written, before
// a drain reads it. After the VACUUM of the drained table its statistics
// say "empty", and with them PostgreSQL ran the hand-written claim of
// rawDrain and naiveDrain (DELETE … WHERE id IN (SELECT … LIMIT n FOR
// UPDATE SKIP LOCKED)) as a nested loop that ran the subquery again for
// each of the table's rows: a drain of 100,000 events ran for minutes,
// until autovacuum happened to analyze the table. The relay's own
// statements do not depend on statistics (see pgstore); the limits must
// not either. Elsewhere a no-op.
func analyze(ctx context.Context, db *sql.DB, dialect, table string) error {
	if dialect != "postgres" {
		return nil
	}
	if _, err := db.ExecContext(ctx, "ANALYZE "+table); err != nil {
		return fmt.Errorf("bench: analyze the backlog: %w", err)
	}
	return nil
}

func rawPublish(ctx context.Context, br broker.Broker, msgs []outbox.Message, batch int) (float64, error) {
	events := make([]outbox.Event, len(msgs))
	for i, m := range msgs {
		events[i] = outbox.Event{ID: int64(i + 1), Message: m.Normalized(), CreatedAt: time.Now()}
	}
	start := time.Now()
	for i := 0; i < len(events); i += batch {
		chunk := events[i:min(i+batch, len(events))]
		for j, err := range br.Publish(ctx, chunk) {
			if err != nil {
				return 0, fmt.Errorf("bench: raw publish of event %d: %w", i+j, err)
			}
		}
	}
	return float64(len(events)) / time.Since(start).Seconds(), nil
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func drain(ctx context.Context, st driver.Store, br broker.Broker, c Config, phase string) (float64, Usage, error) {
	r, err := relay.New(st, br, relay.Config{BatchSize: c.Batch, Workers: c.Workers, Logger: quietLogger(), PollInterval: 5 * time.Millisecond})
	if err != nil {
		return 0, Usage{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	usage := sampleProcesses([]int{os.Getpid()})
	defer usage.halt()
	cpu0, _ := cpuSeconds(os.Getpid())
	stopProgress := progress(c.Out, phase, c.Events, r.Totals().Delivered.Load)
	start := time.Now()
	go func() { defer close(done); _ = r.Run(rctx) }()
	for r.Totals().Delivered.Load() < int64(c.Events) {
		if ctx.Err() != nil {
			stopProgress()
			cancel()
			return 0, Usage{}, ctx.Err()
		}
		time.Sleep(2 * time.Millisecond)
	}
	took := time.Since(start)
	stopProgress()
	used := usage.finish()
	used.CPU -= cpu0
	cancel()
	<-done
	return float64(c.Events) / took.Seconds(), used, nil
}

// usedBy names what DrainUsage measured.
func (r Result) usedBy(c Config) string {
	if c.Relays > 0 {
		return plural(c.Relays, "relay process")
	}
	return "this process (relay, producers and broker clients)"
}

// ackClock wraps a broker and records when each event's confirmation came.
type ackClock struct {
	broker.Broker
	mu    sync.Mutex
	acked map[string]time.Time
}

// Features are the wrapped adapter's, so that the relay orders and sizes
// batches as it does with the adapter itself (Kafka's OrderPartition
// pipelines a key's events; a bare broker.Broker declares no ordering).
func (a *ackClock) Features() broker.Features { return broker.FeaturesOf(a.Broker) }

func (a *ackClock) Publish(ctx context.Context, events []outbox.Event) []error {
	res := a.Broker.Publish(ctx, events)
	now := time.Now()
	a.mu.Lock()
	for i, e := range events {
		if res[i] == nil {
			if _, seen := a.acked[e.EventID]; !seen {
				a.acked[e.EventID] = now
			}
		}
	}
	a.mu.Unlock()
	return res
}

func latency(ctx context.Context, st driver.Store, produce func(context.Context, outbox.Message) error, br broker.Broker, c Config, topic string, res *Result) error {
	res.LatencyAt = "broker ack"
	clock := &ackClock{Broker: br, acked: map[string]time.Time{}}
	r, err := relay.New(st, clock, relay.Config{BatchSize: c.Batch, Workers: c.Workers, Logger: quietLogger()})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	time.Sleep(200 * time.Millisecond) // let the listener connect
	ids, committed, err := steadyLoad(ctx, c, topic, produce, res)
	if err != nil {
		return err
	}
	total := len(ids)
	deadline := time.Now().Add(30 * time.Second)
	for {
		clock.mu.Lock()
		n := len(clock.acked)
		clock.mu.Unlock()
		if n >= total || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	clock.mu.Lock()
	defer clock.mu.Unlock()
	return percentiles(c, ids, committed, clock.acked, res)
}

// steadyLoad commits c.Rate events a second for c.Duration, one event per
// transaction from several writers paced on a shared schedule, and returns
// each event's id and commit time (the first warmed(c) are the Warmup's).
func steadyLoad(ctx context.Context, c Config, topic string, produce func(context.Context, outbox.Message) error, res *Result) ([]string, []time.Time, error) {
	const writers = 8
	total := int(float64(c.Rate) * (c.Warmup + c.Duration).Seconds())
	committed := make([]time.Time, total)
	ids := make([]string, total)
	interval := time.Second / time.Duration(c.Rate)
	start := time.Now()
	var wg sync.WaitGroup
	var firstErr error
	var errMu sync.Mutex
	for p := 0; p < writers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := p; i < total; i += writers {
				time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
				id := outbox.NewEventID()
				err := produce(ctx, outbox.Message{EventID: id, Topic: topic, Key: fmt.Sprintf("order-%d", i%min(c.Keys, 500)), Type: "OrderPaid", Payload: []byte(`{"order_id":42}`)})
				if err != nil {
					errMu.Lock()
					firstErr = err
					errMu.Unlock()
					return
				}
				committed[i], ids[i] = time.Now(), id
			}
		}(p)
	}
	wg.Wait()
	if firstErr != nil {
		return nil, nil, firstErr
	}
	res.AchievedRate = float64(total) / time.Since(start).Seconds()
	return ids, committed, nil
}

// warmed is how many of steadyLoad's events belong to the Warmup.
func warmed(c Config) int { return int(float64(c.Rate) * c.Warmup.Seconds()) }

// percentiles fills res's latency figures from the commit times and the
// times each event was confirmed (or received): the Warmup's first events
// apart, then the measured ones.
func percentiles(c Config, ids []string, committed []time.Time, acked map[string]time.Time, res *Result) error {
	if w := min(warmed(c), len(ids)); w > 0 {
		var warm Result
		if err := latencies(ids[:w], committed[:w], acked, &warm); err != nil {
			return err
		}
		res.WarmupP99, res.WarmupMax = warm.LatencyP99, warm.LatencyMax
		ids, committed = ids[w:], committed[w:]
	}
	return latencies(ids, committed, acked, res)
}

// latencies fills res's latency percentiles for the given events.
func latencies(ids []string, committed []time.Time, acked map[string]time.Time, res *Result) error {
	lat := make([]time.Duration, 0, len(ids))
	for i, id := range ids {
		if t, ok := acked[id]; ok {
			lat = append(lat, max(t.Sub(committed[i]), 0))
		}
	}
	if len(lat) < len(ids) {
		return fmt.Errorf("bench: only %d of %d latency events were confirmed within 30s", len(lat), len(ids))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.LatencyCount = len(lat)
	res.LatencyP50 = lat[len(lat)/2]
	res.LatencyP95 = lat[len(lat)*95/100]
	res.LatencyP99 = lat[len(lat)*99/100]
	res.LatencyMax = lat[len(lat)-1]
	return nil
}

// sampleFloor measures, every 5 ms until ctx ends, one database round trip
// followed by one publish and its ack (publishOne), and returns the sorted
// durations: the least a relay spends between learning of a commit and the
// broker's ack, under the machine's load of the moment.
func sampleFloor(ctx context.Context, db *sql.DB, publishOne func(context.Context) error) []time.Duration {
	var out []time.Duration
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
			return out
		case <-t.C:
		}
		start := time.Now()
		var one int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			continue
		}
		if err := publishOne(ctx); err != nil {
			continue
		}
		out = append(out, time.Since(start))
	}
}
