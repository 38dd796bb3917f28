package orders

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
)

// Topic is where OrderPaid events go (NATS subject, Kafka topic, …).
const Topic = "orders.paid"

// OrderPaid is the event's payload, schema version 1.
type OrderPaid struct {
	OrderID     int64  `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

// ErrDeclined is returned by Pay when the payment is declined: the
// transaction rolls back and no event exists.
var ErrDeclined = errors.New("orders: payment declined")

// Service is the order service: it owns the orders table and writes its
// events through the outbox store in the same transactions.
type Service struct {
	DB      *sql.DB
	Dialect Dialect
	Outbox  store.Store
}

// Create inserts a NEW order and returns its id.
func (s *Service) Create(ctx context.Context, customer string, amountCents int64) (int64, error) {
	if s.Dialect == Postgres {
		var id int64
		err := s.DB.QueryRowContext(ctx, "INSERT INTO orders (customer, amount_cents, status) VALUES ($1, $2, 'NEW') RETURNING id", customer, amountCents).Scan(&id)
		return id, err
	}
	res, err := s.DB.ExecContext(ctx, "INSERT INTO orders (customer, amount_cents, status) VALUES (?, ?, 'NEW')", customer, amountCents)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// Pay marks the order PAID and enqueues OrderPaid in one transaction. When
// decline returns true the payment is refused after the event was written,
// and the rollback must make the event vanish with the order change.
func (s *Service) Pay(ctx context.Context, orderID int64, decline bool) error {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit

	var customer string
	var amount int64
	if err := tx.QueryRowContext(ctx, s.Dialect.rebind("SELECT customer, amount_cents FROM orders WHERE id = ? AND status = 'NEW'"), orderID).Scan(&customer, &amount); err != nil {
		return fmt.Errorf("orders: pay %d: %w", orderID, err)
	}
	msg := outbox.Message{
		EventID:       outbox.NewEventID(),
		Topic:         Topic,
		Key:           fmt.Sprintf("order-%d", orderID),
		Type:          "OrderPaid",
		AggregateType: "Order",
		SchemaVersion: 1,
	}
	msg.Payload, _ = json.Marshal(OrderPaid{OrderID: orderID, Customer: customer, AmountCents: amount})
	if _, err := tx.ExecContext(ctx, s.Dialect.rebind("UPDATE orders SET status = 'PAID', paid_event_id = ? WHERE id = ?"), msg.EventID, orderID); err != nil {
		return err
	}
	if err := s.Outbox.EnqueueTx(ctx, tx, msg); err != nil {
		return err
	}
	if decline {
		return ErrDeclined // the deferred rollback takes the event with it
	}
	return tx.Commit()
}
