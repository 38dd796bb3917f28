package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite"

	"github.com/outbox-go/outbox/inbox"
)

// openExampleDB opens a fresh SQLite database with a points table, the
// consumer's business data.
func openExampleDB() (db *sql.DB, done func()) {
	dir, err := os.MkdirTemp("", "inbox-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err = sql.Open("sqlite", filepath.Join(dir, "points.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE points (customer TEXT PRIMARY KEY, balance INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// A points service consumes OrderPaid events. The broker may deliver one
// twice; Handle runs the handler once and reports the second delivery as a
// duplicate, because the inbox record and the points update commit in the
// same transaction.
func ExampleInbox_Handle() {
	db, done := openExampleDB()
	defer done()
	ctx := context.Background()

	in, err := inbox.New(db, inbox.Config{}) // SQLite detected from the driver
	if err != nil {
		log.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	// In a real consumer this comes from kafkamsg.FromRecord,
	// natsmsg.FromJetStream or amqpmsg.FromDelivery.
	msg := inbox.Message{
		EventID: "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a",
		Type:    "OrderPaid",
		Key:     "order-42",
		Payload: []byte(`{"customer":"alice","amount":120}`),
	}
	addPoints := func(ctx context.Context, tx *sql.Tx) error {
		var paid struct {
			Customer string `json:"customer"`
			Amount   int    `json:"amount"`
		}
		if err := json.Unmarshal(msg.Payload, &paid); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO points (customer, balance) VALUES (?, ?)
			ON CONFLICT (customer) DO UPDATE SET balance = balance + excluded.balance`, paid.Customer, paid.Amount)
		return err
	}

	for delivery := 1; delivery <= 2; delivery++ {
		result, err := in.Handle(ctx, "points", msg, addPoints)
		if err != nil {
			log.Fatal(err) // nothing was recorded: let the broker redeliver
		}
		fmt.Printf("delivery %d: %s\n", delivery, result)
	}

	var balance int
	if err := db.QueryRow(`SELECT balance FROM points WHERE customer = 'alice'`).Scan(&balance); err != nil {
		log.Fatal(err)
	}
	fmt.Println("alice has", balance, "points")
	// Output:
	// delivery 1: processed
	// delivery 2: duplicate
	// alice has 120 points
}

// A handler that fails (or panics) records nothing: its writes roll back
// with the inbox record, and the redelivered message is processed.
func ExampleInbox_Handle_handlerError() {
	db, done := openExampleDB()
	defer done()
	ctx := context.Background()
	in, _ := inbox.New(db, inbox.Config{Dialect: inbox.SQLite})
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	msg := inbox.Message{EventID: "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a", Type: "OrderPaid"}
	credit := func(fail bool) inbox.HandlerFunc {
		return func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO points VALUES ('bob', 10)`); err != nil {
				return err
			}
			if fail {
				panic("lost connection to the loyalty API")
			}
			return nil
		}
	}

	_, err := in.Handle(ctx, "points", msg, credit(true))
	fmt.Println("panic became an error:", errors.Is(err, inbox.ErrHandlerPanic))
	var rows int
	_ = db.QueryRow(`SELECT count(*) FROM points`).Scan(&rows)
	fmt.Println("rows after the failed attempt:", rows)

	result, err := in.Handle(ctx, "points", msg, credit(false))
	fmt.Println("redelivery:", result, err)
	// Output:
	// panic became an error: true
	// rows after the failed attempt: 0
	// redelivery: processed <nil>
}

// Producers evolve an event's payload; the outbox sends the version along
// (ce_schemaversion and friends) and the helpers put it in SchemaVersion.
// The handler switches on it and decodes each version into its own struct.
// An unknown version is an error: nothing is recorded, and the message is
// processed once this consumer has been upgraded.
func ExampleMessage_schemaVersion() {
	db, done := openExampleDB()
	defer done()
	ctx := context.Background()
	in, _ := inbox.New(db, inbox.Config{})
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	type orderPaidV1 struct { // amount in whole euros
		Customer string `json:"customer"`
		Euros    int    `json:"euros"`
	}
	type orderPaidV2 struct { // amount with currency, in cents
		Customer string `json:"customer_id"`
		Amount   struct {
			Cents    int    `json:"cents"`
			Currency string `json:"currency"`
		} `json:"amount"`
	}
	// pointsFor decodes any known version into what the consumer needs.
	pointsFor := func(msg inbox.Message) (customer string, points int, err error) {
		switch msg.SchemaVersion {
		case 1:
			var v orderPaidV1
			if err := json.Unmarshal(msg.Payload, &v); err != nil {
				return "", 0, err
			}
			return v.Customer, v.Euros, nil
		case 2:
			var v orderPaidV2
			if err := json.Unmarshal(msg.Payload, &v); err != nil {
				return "", 0, err
			}
			return v.Customer, v.Amount.Cents / 100, nil
		default:
			return "", 0, fmt.Errorf("OrderPaid schema version %d is newer than this consumer: deploy the upgrade", msg.SchemaVersion)
		}
	}

	for _, msg := range []inbox.Message{
		{EventID: "0192f6c4-8a59-7c3e-9f3b-000000000001", Type: "OrderPaid", SchemaVersion: 1,
			Payload: []byte(`{"customer":"alice","euros":30}`)},
		{EventID: "0192f6c4-8a59-7c3e-9f3b-000000000002", Type: "OrderPaid", SchemaVersion: 2,
			Payload: []byte(`{"customer_id":"alice","amount":{"cents":4550,"currency":"EUR"}}`)},
		{EventID: "0192f6c4-8a59-7c3e-9f3b-000000000003", Type: "OrderPaid", SchemaVersion: 3,
			Payload: []byte(`{"whatever":"comes next"}`)},
	} {
		result, err := in.Handle(ctx, "points", msg, func(ctx context.Context, tx *sql.Tx) error {
			customer, points, err := pointsFor(msg)
			if err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO points (customer, balance) VALUES (?, ?)
				ON CONFLICT (customer) DO UPDATE SET balance = balance + excluded.balance`, customer, points)
			return err
		})
		if err != nil {
			fmt.Printf("v%d: %s (not recorded)\n", msg.SchemaVersion, result)
			continue
		}
		fmt.Printf("v%d: %s\n", msg.SchemaVersion, result)
	}
	var balance int
	_ = db.QueryRow(`SELECT balance FROM points WHERE customer = 'alice'`).Scan(&balance)
	fmt.Println("alice has", balance, "points")
	// Output:
	// v1: processed
	// v2: processed
	// v3: failed (not recorded)
	// alice has 75 points
}

// HandleTx is for code that runs its own transaction: it records the
// event and says whether it was a duplicate.
func ExampleInbox_HandleTx() {
	db, done := openExampleDB()
	defer done()
	ctx := context.Background()
	in, _ := inbox.New(db, inbox.Config{})
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	msg := inbox.Message{EventID: "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a"}

	for i := 0; i < 2; i++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		dup, err := in.HandleTx(ctx, tx, "points", msg)
		if err != nil {
			_ = tx.Rollback()
			log.Fatal(err)
		}
		if dup {
			_ = tx.Rollback()
			fmt.Println("already processed")
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO points VALUES ('carol', 5)`); err != nil {
			_ = tx.Rollback()
			log.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			log.Fatal(err)
		}
		fmt.Println("processed")
	}
	// Output:
	// processed
	// already processed
}

// CheckVersion keeps a last-writer-wins read model correct when an older
// event arrives after a newer one (competing consumers, a redelivered
// failure): the stale event is recorded as processed but changes nothing.
func ExampleInbox_CheckVersion() {
	db, done := openExampleDB()
	defer done()
	ctx := context.Background()
	in, _ := inbox.New(db, inbox.Config{})
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE order_status (order_id TEXT PRIMARY KEY, status TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	type statusChanged struct {
		Version int64  `json:"version"` // the order aggregate's version
		Status  string `json:"status"`
	}
	deliveries := []struct {
		id      string
		payload string
	}{
		{"0192f6c4-8a59-7c3e-9f3b-000000000001", `{"version":1,"status":"paid"}`},
		{"0192f6c4-8a59-7c3e-9f3b-000000000003", `{"version":3,"status":"delivered"}`},
		{"0192f6c4-8a59-7c3e-9f3b-000000000002", `{"version":2,"status":"shipped"}`}, // late
	}
	for _, d := range deliveries {
		msg := inbox.Message{EventID: d.id, Key: "order-42", Payload: []byte(d.payload)}
		_, err := in.Handle(ctx, "order-view", msg, func(ctx context.Context, tx *sql.Tx) error {
			var ev statusChanged
			if err := json.Unmarshal(msg.Payload, &ev); err != nil {
				return err
			}
			stale, err := in.CheckVersion(ctx, tx, "order-view", msg.Key, ev.Version)
			if err != nil || stale {
				fmt.Printf("v%d %s: stale=%v\n", ev.Version, ev.Status, stale)
				return err
			}
			fmt.Printf("v%d %s: applied\n", ev.Version, ev.Status)
			_, err = tx.ExecContext(ctx, `INSERT INTO order_status VALUES (?, ?)
				ON CONFLICT (order_id) DO UPDATE SET status = excluded.status`, msg.Key, ev.Status)
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	var status string
	_ = db.QueryRow(`SELECT status FROM order_status WHERE order_id = 'order-42'`).Scan(&status)
	fmt.Println("order-42 is", status)
	// Output:
	// v1 paid: applied
	// v3 delivered: applied
	// v2 shipped: stale=true
	// order-42 is delivered
}

// Purge keeps the inbox table small. Keep records well beyond the longest
// time the broker may redeliver a message.
func ExampleInbox_Purge() {
	db, done := openExampleDB()
	defer done()
	ctx := context.Background()
	in, _ := inbox.New(db, inbox.Config{})
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	_, _ = in.Handle(ctx, "points", inbox.Message{EventID: "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a"},
		func(context.Context, *sql.Tx) error { return nil })

	// Typically from a ticker: every hour, drop records older than 14 days.
	n, err := in.Purge(ctx, 14*24*time.Hour, 1000)
	fmt.Println("purged", n, err)
	// Output:
	// purged 0 <nil>
}
