package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox/internal/redact"
)

// Config says what to measure.
type Config struct {
	DB       string        // --db: PostgreSQL URL
	Broker   string        // --broker: NATS URL
	Events   int           // --events: backlog size of the drain; default 100,000
	Rate     int           // --rate: events/s of the latency run; default 1,000
	Duration time.Duration // --duration: length of the latency run; default 30s
	// Batch is the queue schema's SubscribeBatchSize: rows one SELECT …
	// FOR UPDATE reads and one DELETE acknowledges (--batch; default 1,000,
	// the relay's default batch; watermill's own default is 100).
	Batch int
	// Poll is the SQL subscriber's PollInterval, its wait after a SELECT
	// that found nothing (--poll; default 10ms; watermill's default is 1s).
	Poll     time.Duration
	Keys     int           // distinct event keys (a "key" header); default 5,000
	Payload  int           // payload bytes; default 200
	Writers  int           // concurrent producers of the latency run; default 8
	Progress time.Duration // interval of the progress lines; default 1s
	Out      io.Writer     // progress lines; nil: discarded
}

func (c *Config) setDefaults() {
	if c.Events <= 0 {
		c.Events = 100_000
	}
	if c.Rate <= 0 {
		c.Rate = 1000
	}
	if c.Duration <= 0 {
		c.Duration = 30 * time.Second
	}
	if c.Batch <= 0 {
		c.Batch = 1000
	}
	if c.Poll <= 0 {
		c.Poll = 10 * time.Millisecond
	}
	if c.Keys <= 0 {
		c.Keys = 5000
	}
	if c.Payload <= 0 {
		c.Payload = 200
	}
	if c.Writers <= 0 {
		c.Writers = 8
	}
	if c.Progress <= 0 {
		c.Progress = time.Second
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// Result holds the figures of one run (what --json writes).
type Result struct {
	Peer     string            `json:"peer"`
	Versions map[string]string `json:"versions"`
	Settings map[string]string `json:"settings"`
	// Table and Stream are the run's watermill-sql table and JetStream
	// stream, both removed when the run ends.
	Table  string `json:"table"`
	Stream string `json:"stream"`

	DrainEvents  int     `json:"drain_events"`
	DrainSeconds float64 `json:"drain_seconds"`
	DrainRate    float64 `json:"drain_events_per_second"`

	LatencyTargetRate  int     `json:"latency_target_rate"`
	LatencyAchieved    float64 `json:"latency_achieved_rate"`
	LatencySeconds     float64 `json:"latency_seconds"`
	LatencyEvents      int     `json:"latency_events"`
	LatencyReceived    int     `json:"latency_received"`
	LatencyP50Ms       float64 `json:"latency_p50_ms"`
	LatencyP95Ms       float64 `json:"latency_p95_ms"`
	LatencyP99Ms       float64 `json:"latency_p99_ms"`
	LatencyMaxMs       float64 `json:"latency_max_ms"`
	LatencyMeasuredAt  string  `json:"latency_measured_at"`
	p50, p95, p99, max time.Duration
}

// Headers the producers set on each event (watermill metadata, which the
// forwarder keeps and watermill-nats writes as NATS headers).
const (
	seqHeader = "peers_seq" // the event's index in its phase
	keyHeader = "key"       // an aggregate key, spread over Config.Keys
)

const (
	phaseDrain   = 0
	phaseLatency = 1
)

// names are one run's resources, unique so that runs never collide with
// each other or with the main project's streams and tables.
type names struct {
	topic   string // the forwarder topic: watermill-sql's table is "watermill_" + topic
	table   string
	subject string // NATS subjects subject.drain and subject.latency
	stream  string
}

func newNames() names {
	var b [4]byte
	_, _ = rand.Read(b[:])
	s := strconv.FormatInt(time.Now().Unix(), 36) + hex.EncodeToString(b[:])
	return names{
		topic:   "peers_wm_" + s,
		table:   `"watermill_peers_wm_` + s + `"`,
		subject: "peers_wm_" + s,
		stream:  "PEERS_WM_" + strings.ToUpper(s),
	}
}

// receipts records, per phase, when the JetStream consumer first received
// each event.
type receipts struct {
	mu    sync.Mutex
	at    [2][]time.Time
	count [2]atomic.Int64
}

func (r *receipts) got(phase, seq int, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq < 0 || seq >= len(r.at[phase]) || !r.at[phase][seq].IsZero() {
		return
	}
	r.at[phase][seq] = now
	r.count[phase].Add(1)
}

// run measures watermill-sql's outbox path to NATS JetStream: the drain of
// a pre-filled backlog, then the commit-to-receipt latency at a steady rate.
// It removes its table and stream before it returns.
func run(ctx context.Context, c Config) (*Result, error) {
	c.setDefaults()
	n := newNames()
	logger := watermill.NopLogger{}
	res := &Result{
		Peer:     "watermill-sql outbox table (PostgreSQL) → watermill Forwarder → NATS JetStream (watermill-nats)",
		Versions: map[string]string{},
		Settings: map[string]string{
			"schema":           "PostgreSQLQueueSchema (payload JSON)",
			"offsets":          "PostgreSQLQueueOffsetsAdapter{DeleteOnAck: true}",
			"subscribe_batch":  strconv.Itoa(c.Batch),
			"poll_interval":    c.Poll.String(),
			"ack_deadline":     "30s (default)",
			"resend_interval":  "1s (default, used only after a nack)",
			"nats_publisher":   "watermill-nats pkg/nats, JetStream enabled, TrackMsgId, PubAck awaited per message",
			"sql_driver":       "database/sql with pgx/v5/stdlib (BeginnerFromStdSQL, TxFromStdSQL)",
			"producer":         "one transaction per event: sql.NewPublisher(TxFromStdSQL(tx)) wrapped in forwarder.NewPublisher",
			"latency_writers":  strconv.Itoa(c.Writers),
			"payload_bytes":    strconv.Itoa(c.Payload),
			"keys":             strconv.Itoa(c.Keys),
			"jetstream_stream": "file storage, 2m duplicate window",
		},
		Table:             n.table,
		Stream:            n.stream,
		LatencyMeasuredAt: "commit returned → JetStream consumer received (one process, one clock)",
	}
	for _, m := range []string{"github.com/ThreeDotsLabs/watermill", "github.com/ThreeDotsLabs/watermill-sql/v4", "github.com/ThreeDotsLabs/watermill-nats/v2", "github.com/nats-io/nats.go", "github.com/jackc/pgx/v5"} {
		res.Versions[m] = moduleVersion(m)
	}

	db, err := sql.Open("pgx", c.DB)
	if err != nil {
		return nil, fmt.Errorf("peers: open %s: %w", redact.URL(c.DB), err)
	}
	defer func() { _ = db.Close() }()
	db.SetMaxOpenConns(c.Writers + 4)
	db.SetMaxIdleConns(c.Writers + 4)
	if err := db.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("peers: connect to PostgreSQL at %s: %w", redact.URL(c.DB), err)
	}

	nc, err := nats.Connect(c.Broker)
	if err != nil {
		return nil, fmt.Errorf("peers: connect to NATS at %s: %w", redact.URL(c.Broker), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: n.stream, Subjects: []string{n.subject + ".>"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}); err != nil {
		return nil, fmt.Errorf("peers: create stream %s: %w", n.stream, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(cctx, n.stream)
	}()

	schema := wsql.PostgreSQLQueueSchema{SubscribeBatchSize: c.Batch}
	offsets := wsql.PostgreSQLQueueOffsetsAdapter{DeleteOnAck: true}
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), wsql.SubscriberConfig{
		SchemaAdapter:    schema,
		OffsetsAdapter:   offsets,
		PollInterval:     c.Poll,
		InitializeSchema: true,
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("peers: SQL subscriber: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = db.ExecContext(cctx, "DROP TABLE IF EXISTS "+n.table)
	}()
	defer func() { _ = sub.Close() }() // before the table goes
	// The table exists before the first producer writes (its publisher
	// runs in the producer's transaction, where AutoInitializeSchema is
	// refused).
	if err := sub.SubscribeInitialize(n.topic); err != nil {
		return nil, fmt.Errorf("peers: create table %s: %w", n.table, err)
	}

	natsPub, err := wnats.NewPublisher(wnats.PublisherConfig{
		URL: c.Broker,
		JetStream: wnats.JetStreamConfig{
			TrackMsgId: true, // Nats-Msg-Id = message UUID: JetStream drops a re-sent event
		},
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("peers: watermill NATS publisher: %w", err)
	}
	defer func() { _ = natsPub.Close() }()

	fwd, err := forwarder.NewForwarder(sub, natsPub, logger, forwarder.Config{ForwarderTopic: n.topic})
	if err != nil {
		return nil, fmt.Errorf("peers: forwarder: %w", err)
	}

	total := int(float64(c.Rate) * c.Duration.Seconds())
	rec := &receipts{}
	rec.at[phaseDrain] = make([]time.Time, c.Events)
	rec.at[phaseLatency] = make([]time.Time, total)
	cons, err := js.OrderedConsumer(ctx, n.stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{n.subject + ".>"}})
	if err != nil {
		return nil, fmt.Errorf("peers: JetStream consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		now := time.Now()
		phase := phaseDrain
		if strings.HasSuffix(m.Subject(), ".latency") {
			phase = phaseLatency
		}
		seq, err := strconv.Atoi(m.Headers().Get(seqHeader))
		if err != nil {
			return
		}
		rec.got(phase, seq, now)
	})
	if err != nil {
		return nil, fmt.Errorf("peers: JetStream consume: %w", err)
	}
	defer cc.Stop()

	fmt.Fprintf(c.Out, "peers: PostgreSQL %s, NATS %s: table %s, stream %s (both removed after the run)\n", redact.URL(c.DB), redact.URL(c.Broker), n.table, n.stream)
	payload := makePayload(c.Payload)

	// (1) drain: the backlog is committed before the forwarder starts.
	if err := prefill(ctx, db, schema, n, c, payload); err != nil {
		return nil, err
	}
	fctx, stopFwd := context.WithCancel(ctx)
	defer stopFwd()
	fwdDone := make(chan error, 1)
	start := time.Now()
	go func() { fwdDone <- fwd.Run(fctx) }()
	defer func() {
		_ = fwd.Close()
		stopFwd()
		<-fwdDone
	}()
	if err := waitFor(ctx, c, fwdDone, func() (int64, int64, string) {
		got := rec.count[phaseDrain].Load()
		el := time.Since(start)
		return got, int64(c.Events), fmt.Sprintf("peers: drain %d/%d received, %.0f ev/s over %s", got, c.Events, float64(got)/el.Seconds(), el.Round(time.Millisecond))
	}, time.Minute); err != nil {
		return nil, fmt.Errorf("peers: drain: %w", err)
	}
	took := time.Since(start)
	res.DrainEvents, res.DrainSeconds, res.DrainRate = c.Events, took.Seconds(), float64(c.Events)/took.Seconds()
	fmt.Fprintf(c.Out, "peers: drain of %d events: %.0f ev/s (%s)\n", c.Events, res.DrainRate, took.Round(time.Millisecond))

	// (2) latency: producers commit at c.Rate while the forwarder runs.
	committed, achieved, err := steady(ctx, db, schema, n, c, total, payload, rec)
	if err != nil {
		return nil, err
	}
	res.LatencyTargetRate, res.LatencyAchieved, res.LatencyEvents = c.Rate, achieved, total
	if err := waitFor(ctx, c, fwdDone, func() (int64, int64, string) {
		got := rec.count[phaseLatency].Load()
		return got, int64(total), fmt.Sprintf("peers: latency run over, %d/%d received", got, total)
	}, 30*time.Second); err != nil {
		fmt.Fprintf(c.Out, "peers: latency: %v; reporting the events received\n", err)
	}
	rec.mu.Lock()
	lat := make([]time.Duration, 0, total)
	for i, t := range rec.at[phaseLatency] {
		if !t.IsZero() && !committed[i].IsZero() {
			lat = append(lat, max(t.Sub(committed[i]), 0))
		}
	}
	rec.mu.Unlock()
	res.LatencySeconds = c.Duration.Seconds()
	res.LatencyReceived = len(lat)
	if len(lat) == 0 {
		return nil, errors.New("peers: latency: no event received")
	}
	if len(lat) < total {
		return nil, fmt.Errorf("peers: latency: %d of %d events received within 30s of the last commit", len(lat), total)
	}
	slices.Sort(lat)
	res.p50, res.p95, res.p99, res.max = lat[len(lat)*50/100], lat[len(lat)*95/100], lat[len(lat)*99/100], lat[len(lat)-1]
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	res.LatencyP50Ms, res.LatencyP95Ms, res.LatencyP99Ms, res.LatencyMaxMs = ms(res.p50), ms(res.p95), ms(res.p99), ms(res.max)
	return res, nil
}

// publishInTx writes msgs into the forwarder's table in one transaction
// through watermill-sql's publisher, wrapped by the forwarder's publisher
// (the envelope names the NATS subject), as an application would next to
// its own writes. One publisher per transaction, as watermill documents.
func publishInTx(ctx context.Context, db *sql.DB, schema wsql.SchemaAdapter, n names, subject string, msgs []*message.Message) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	pub, err := wsql.NewPublisher(wsql.TxFromStdSQL(tx), wsql.PublisherConfig{SchemaAdapter: schema}, watermill.NopLogger{})
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: n.topic}).Publish(subject, msgs...); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func newMessage(ctx context.Context, c Config, seq int, payload []byte) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), payload)
	m.Metadata.Set(seqHeader, strconv.Itoa(seq))
	m.Metadata.Set(keyHeader, "order-"+strconv.Itoa(seq%c.Keys))
	m.SetContext(ctx)
	return m
}

// prefill commits c.Events events, 1,000 per transaction.
func prefill(ctx context.Context, db *sql.DB, schema wsql.SchemaAdapter, n names, c Config, payload []byte) error {
	const perTx = 1000
	last := time.Now()
	for i := 0; i < c.Events; i += perTx {
		msgs := make([]*message.Message, 0, perTx)
		for j := i; j < min(i+perTx, c.Events); j++ {
			msgs = append(msgs, newMessage(ctx, c, j, payload))
		}
		if err := publishInTx(ctx, db, schema, n, n.subject+".drain", msgs); err != nil {
			return fmt.Errorf("peers: pre-fill: %w", err)
		}
		if time.Since(last) >= c.Progress {
			last = time.Now()
			fmt.Fprintf(c.Out, "peers: pre-fill %d/%d committed\n", i+len(msgs), c.Events)
		}
	}
	fmt.Fprintf(c.Out, "peers: pre-filled %d events\n", c.Events)
	return nil
}

// steady commits total events at c.Rate, one per transaction, from
// c.Writers producers on a shared schedule, and returns when each
// transaction's commit returned and the achieved rate.
func steady(ctx context.Context, db *sql.DB, schema wsql.SchemaAdapter, n names, c Config, total int, payload []byte, rec *receipts) ([]time.Time, float64, error) {
	committed := make([]time.Time, total)
	interval := time.Second / time.Duration(c.Rate)
	var done atomic.Int64
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	start := time.Now()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(c.Progress)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				fmt.Fprintf(c.Out, "peers: latency %s/%s: %d committed, %d received\n", time.Since(start).Round(time.Second), c.Duration, done.Load(), rec.count[phaseLatency].Load())
			}
		}
	}()
	for w := 0; w < c.Writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < total; i += c.Writers {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(start.Add(time.Duration(i) * interval))):
				}
				err := publishInTx(ctx, db, schema, n, n.subject+".latency", []*message.Message{newMessage(ctx, c, i, payload)})
				if err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("peers: latency producer: %w", err)
					}
					errMu.Unlock()
					return
				}
				committed[i] = time.Now()
				done.Add(1)
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	<-stopped // its last line is written before the caller writes again
	if firstErr != nil {
		return nil, 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	return committed, float64(total) / time.Since(start).Seconds(), nil
}

// waitFor polls until check reports done, printing its line every
// c.Progress; it fails when ctx ends, the forwarder stops, or nothing
// changes for stall.
func waitFor(ctx context.Context, c Config, fwdDone <-chan error, check func() (got, want int64, line string), stall time.Duration) error {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	lastPrint, lastGot, lastChange := time.Now(), int64(-1), time.Now()
	for {
		got, want, line := check()
		if got >= want {
			return nil
		}
		if got != lastGot {
			lastGot, lastChange = got, time.Now()
		}
		if time.Since(lastPrint) >= c.Progress {
			fmt.Fprintln(c.Out, line)
			lastPrint = time.Now()
		}
		if time.Since(lastChange) > stall {
			return fmt.Errorf("no progress for %s (%s)", stall, line)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-fwdDone:
			return fmt.Errorf("forwarder stopped: %v", err)
		case <-tick.C:
		}
	}
}

// makePayload returns size bytes of JSON, the kind of body an event carries.
func makePayload(size int) []byte {
	p := []byte(`{"order_id":42,"pad":"`)
	for len(p) < size-2 {
		p = append(p, 'x')
	}
	return append(p, '"', '}')[:max(size, 0)]
}

// moduleVersion is the version of module path this binary was built with.
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "unknown"
}
