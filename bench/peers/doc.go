// Command peers measures a peer's transactional outbox on the same servers
// as ours, so that the figures of `outbox bench` can be read next to it
// (issue 27, item 3). It lives in a module of its own
// (github.com/outbox-go/outbox/bench/peers; go.work joins it) so that the
// peer's dependencies never reach the library's users.
//
// # The peer
//
// Watermill's outbox path: github.com/ThreeDotsLabs/watermill v1.5.1,
// github.com/ThreeDotsLabs/watermill-sql/v4 v4.1.2 and
// github.com/ThreeDotsLabs/watermill-nats/v2 v2.1.3 (the versions the run
// was built with are printed and written to --json):
//
//	producer transaction ──► sql.NewPublisher(sql.TxFromStdSQL(tx)) wrapped by forwarder.NewPublisher
//	                         (a row in watermill's PostgreSQL table: an envelope naming the NATS subject)
//	forwarder.NewForwarder(sql.NewSubscriber(…), watermill-nats publisher) ──► NATS JetStream
//	JetStream ordered consumer on the same stream, in this process ──► receipt time
//
// Every piece is watermill's own; nothing is written by hand (the
// watermill-nats module is served by the Go module proxy, so no stand-in
// publisher was needed).
//
// # What is measured
//
// The same two figures as `outbox bench`:
//
//  1. drain: --events events (200-byte JSON payloads, a "key" header
//     spread over 5,000 keys) are committed, 1,000 per transaction, before
//     the forwarder starts; the figure is the time from Forwarder.Run to the
//     JetStream consumer having received every one of them, as events/s.
//  2. latency: producers (8 goroutines on a shared schedule, one event per
//     transaction) commit --rate events/s for --duration while the
//     forwarder runs; for each event the time from its Commit returning to
//     the JetStream consumer receiving it, reported as p50, p95, p99 and
//     max. Both instants are read from this process's clock. The commit
//     time cannot be written into the event (it is known only once Commit
//     returns), so the event carries its index in a "peers_seq" header
//     (watermill metadata, which watermill-nats writes as a NATS header)
//     and the commit and receipt times are matched by it. A run in which
//     an event is not received fails.
//
// This is commit → consumer receipt, the quantity `outbox bench --relays 1`
// reports ("consumer receipt"); `outbox bench` with its relay in process
// reports commit → broker ack, which comes one JetStream delivery earlier.
// Our bench receives on a core NATS subscription to the subject, this one
// on a JetStream ordered consumer; both see a message as JetStream stores
// it.
//
// # Settings, and why
//
// Watermill's SQL Pub/Sub documentation names it the way to implement the
// outbox pattern with the Forwarder; these are the choices its
// documentation and its configuration comments point to for throughput:
//
//   - Schema: sql.PostgreSQLQueueSchema with
//     sql.PostgreSQLQueueOffsetsAdapter{DeleteOnAck: true}, the documented
//     "queue" alternative to DefaultPostgreSQLSchema: a forwarder needs no
//     consumer groups, the table does not grow (rows are deleted when
//     acknowledged, as ours are when published), and reads do not depend on
//     transaction ids (the documentation advises it when long transactions
//     exist). The default schema keeps every row and tracks a consumer
//     group's offset in a second table.
//   - SubscribeBatchSize 1,000 (--batch): the rows one SELECT … FOR UPDATE
//     reads and one DELETE acknowledges. Watermill's comment: a higher value
//     helps when consuming a lot of messages, at the price of more
//     re-delivery after a crash; its default is 100. 1,000 is our relay's
//     default batch.
//   - PollInterval 10ms (--poll): the subscriber's wait after a SELECT that
//     found nothing. Watermill has no notification, so this bounds the
//     latency of an idle forwarder; its default, 1s, would make the latency
//     figure a function of the setting. It does not affect the drain (a
//     busy subscriber queries again at once).
//   - AckDeadline 30s, ResendInterval 1s, RetryInterval 1s: the defaults;
//     they act only when a message is nacked or a query fails.
//   - InitializeSchema on the subscriber, through SubscribeInitialize before
//     any producer writes; the publisher's AutoInitializeSchema stays off
//     (watermill refuses it inside a transaction). The payload column keeps
//     its default type, JSON (the forwarder's envelope is JSON).
//   - NATS: watermill-nats pkg/nats with JetStream enabled (its
//     documentation recommends pkg/nats over the beta pkg/jetstream for
//     production), TrackMsgId (Nats-Msg-Id = the message UUID, so JetStream
//     drops a re-sent event; the documentation requires it for exactly-once),
//     AutoProvision off (the run creates the stream), the default
//     NATSMarshaler (payload as the body, metadata as headers). Each publish
//     waits for its PubAck.
//   - Forwarder: forwarder.Config{ForwarderTopic} with its defaults; the SQL
//     subscriber hands it one message at a time, and it publishes and acks
//     each before the next.
//   - Database: database/sql with the pgx/v5 stdlib driver
//     (sql.BeginnerFromStdSQL, sql.TxFromStdSQL), the *sql.Tx path the
//     documentation shows; one watermill publisher per transaction, as it
//     says. Pool: 12 connections. Loggers: watermill.NopLogger.
//   - Stream: file storage, 2-minute duplicate window, as `outbox bench`
//     creates its stream.
//
// # Running it
//
//	go run ./bench/peers --db postgres://postgres@127.0.0.1:5432/test --broker nats://127.0.0.1:4222 \
//	    [--events 100000] [--rate 1000] [--duration 30s] [--batch 1000] [--poll 10ms] [--json FILE]
//
// It prints a progress line every second and a table at the end; --json
// writes the figures and settings. Each run creates a table
// "watermill_peers_wm_<unique>" and a stream PEERS_WM_<UNIQUE> (subjects
// peers_wm_<unique>.drain and .latency), so runs never collide with each
// other or with the main project's streams, and removes both when it ends
// (also on Ctrl-C). The machine's other load moves these figures as much
// as it moves ours: compare runs made in the same quiet window.
//
// The test (go test ./bench/peers) runs a 500-event drain and 1 s at
// 200 ev/s against the local servers (OUTBOX_TEST_POSTGRES,
// OUTBOX_TEST_NATS); with CI=true an unreachable server fails it.
package main
