package orders

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/natsmsg"
)

// Consumer is one downstream service: it applies each OrderPaid to its own
// table, inside the transaction that records the event in its inbox.
type Consumer struct {
	Name  string
	Apply func(ctx context.Context, tx *sql.Tx, d Dialect, e OrderPaid) error
}

// The three consumers of the demo's story. Each effect table has the order
// id as primary key, so applying an event twice would fail loudly rather
// than double the effect: the inbox is what makes a redelivery harmless.
var (
	Points = Consumer{"points", func(ctx context.Context, tx *sql.Tx, d Dialect, e OrderPaid) error {
		_, err := tx.ExecContext(ctx, d.rebind("INSERT INTO points_ledger (order_id, customer, points) VALUES (?, ?, ?)"), e.OrderID, e.Customer, e.AmountCents/100)
		return err
	}}
	Shipping = Consumer{"shipping", func(ctx context.Context, tx *sql.Tx, d Dialect, e OrderPaid) error {
		_, err := tx.ExecContext(ctx, d.rebind("INSERT INTO shipments (order_id, status) VALUES (?, 'REQUESTED')"), e.OrderID)
		return err
	}}
	Notifications = Consumer{"notifications", func(ctx context.Context, tx *sql.Tx, d Dialect, e OrderPaid) error {
		body := fmt.Sprintf("Thanks %s, order %d is paid.", e.Customer, e.OrderID)
		_, err := tx.ExecContext(ctx, d.rebind("INSERT INTO notifications (order_id, body) VALUES (?, ?)"), e.OrderID, body)
		return err
	}}
)

// Decode reads an OrderPaid of any schema version this consumer knows.
func Decode(m inbox.Message) (OrderPaid, error) {
	var e OrderPaid
	switch m.SchemaVersion {
	case 1:
		if err := json.Unmarshal(m.Payload, &e); err != nil {
			return e, fmt.Errorf("orders: OrderPaid v1: %w", err)
		}
		return e, nil
	default:
		return e, fmt.Errorf("orders: OrderPaid schema version %d is not known to this consumer; upgrade it", m.SchemaVersion)
	}
}

// RunOptions inject the demo's faults into a consumer.
type RunOptions struct {
	// Fail, if set, is asked before the handler runs; an error fails this
	// delivery (nothing is recorded) and the broker redelivers it.
	Fail func(e OrderPaid, delivery uint64) error
	// DropAck, if set and true, makes the consumer "crash" after its
	// transaction committed but before it acknowledged: the broker
	// redelivers, and the inbox absorbs the duplicate.
	DropAck func(e OrderPaid, delivery uint64) bool
	// AckWait is how long the broker waits for an ack; default 5s.
	AckWait time.Duration
	// OnError receives errors that are not the message's fault.
	OnError func(error)
}

// Run consumes the stream with a durable consumer named after c until ctx
// ends. Every delivery is logged in the deliveries table with its outcome.
func (c Consumer) Run(ctx context.Context, js jetstream.JetStream, stream string, in *inbox.Inbox, d Dialect, opts RunOptions) error {
	if opts.AckWait <= 0 {
		opts.AckWait = 5 * time.Second
	}
	if opts.OnError == nil {
		opts.OnError = func(error) {}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: c.Name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: opts.AckWait, FilterSubject: Topic, MaxAckPending: 32,
	})
	if err != nil {
		return fmt.Errorf("orders: consumer %s: %w", c.Name, err)
	}
	db := in.DB()
	logDelivery := func(eventID string, seq, n uint64, outcome string) {
		_, err := db.ExecContext(context.WithoutCancel(ctx), d.rebind("INSERT INTO deliveries (consumer, event_id, stream_seq, num_delivered, outcome) VALUES (?, ?, ?, ?, ?)"), c.Name, eventID, seq, n, outcome)
		if err != nil {
			opts.OnError(err)
		}
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		md, err := msg.Metadata()
		if err != nil {
			opts.OnError(err)
			_ = msg.Nak()
			return
		}
		im, err := natsmsg.FromJetStream(msg)
		if err != nil { // not an outbox event: never retry it
			logDelivery("", md.Sequence.Stream, md.NumDelivered, "malformed")
			_ = msg.Term()
			return
		}
		e, err := Decode(im)
		if err != nil {
			logDelivery(im.EventID, md.Sequence.Stream, md.NumDelivered, "malformed")
			_ = msg.Term()
			return
		}
		if opts.Fail != nil {
			if err := opts.Fail(e, md.NumDelivered); err != nil {
				logDelivery(im.EventID, md.Sequence.Stream, md.NumDelivered, "failed")
				_ = msg.NakWithDelay(100 * time.Millisecond)
				return
			}
		}
		res, err := in.Handle(ctx, c.Name, im, func(ctx context.Context, tx *sql.Tx) error { return c.Apply(ctx, tx, d, e) })
		logDelivery(im.EventID, md.Sequence.Stream, md.NumDelivered, res.String())
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				opts.OnError(fmt.Errorf("%s: %w", c.Name, err))
			}
			_ = msg.NakWithDelay(100 * time.Millisecond)
			return
		}
		if opts.DropAck != nil && opts.DropAck(e, md.NumDelivered) {
			return // "crash" before the ack: the broker redelivers
		}
		_ = msg.Ack()
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Stop()
	<-cc.Closed()
	return nil
}
