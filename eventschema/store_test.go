package eventschema_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

// A message refused by Options.Check leaves nothing written, names its index
// in the call, and leaves the caller's transaction usable.
func TestStoreCheckAtEnqueue(t *testing.T) {
	ctx := context.Background()
	reg := registry(t)
	st, err := sqlitestore.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "app.db"),
		sqlitestore.Config{Options: store.Options{Check: reg.Check}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	db := st.DB()
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id TEXT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}

	good := msg(1, `{"order_id":"o-1","amount_cents":1999}`)
	bad := msg(1, `{"order_id":"o-2","amount_cents":"19.99"}`)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES ('o-1')"); err != nil {
		t.Fatal(err)
	}
	err = st.EnqueueTx(ctx, tx, good, good, bad)
	refused(t, err, "Payload/amount_cents", "got string, want integer")
	var ve *outbox.ValidationError
	if errors.As(err, &ve) && ve.Index != 2 {
		t.Errorf("Index = %d, want 2 (the third message): %v", ve.Index, err)
	}

	// The transaction goes on: another enqueue and a business write, then commit.
	if err := st.EnqueueTx(ctx, tx, good); err != nil {
		t.Fatalf("the transaction is not usable after the refusal: %v", err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES ('o-3')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	// Enqueue (the store's own transaction) refuses the same way.
	err = st.Enqueue(ctx, bad)
	refused(t, err, "Payload/amount_cents", "got string, want integer")

	stats, err := st.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats.New != 1 {
		t.Errorf("%d events stored, want 1: the refused calls wrote something", stats.New)
	}
	var orders int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM orders").Scan(&orders); err != nil {
		t.Fatal(err)
	}
	if orders != 2 {
		t.Errorf("%d orders, want 2", orders)
	}

	// Built-in validation runs first: Check never sees a message without a topic.
	noTopic := bad
	noTopic.Topic = ""
	if err := st.Enqueue(ctx, noTopic); !errors.Is(err, outbox.ErrEmptyTopic) || errors.Is(err, outbox.ErrSchemaViolation) {
		t.Errorf("err = %v, want the built-in ErrEmptyTopic first", err)
	}
}

// A Check that returns a plain error gets a *outbox.ValidationError around
// it, with the index.
func TestStoreCheckPlainError(t *testing.T) {
	ctx := context.Background()
	errNope := errors.New("nope")
	var seen []outbox.Message
	check := func(m outbox.Message) error {
		seen = append(seen, m)
		if m.Key == "bad" {
			return errNope
		}
		return nil
	}
	st, err := sqlitestore.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "app.db"),
		sqlitestore.Config{Options: store.Options{Check: check}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	err = st.Enqueue(ctx, outbox.Message{Topic: "t", Type: "T"}, outbox.Message{Topic: "t", Key: "bad", Type: "T"})
	var ve *outbox.ValidationError
	if !errors.As(err, &ve) || ve.Index != 1 || !errors.Is(err, errNope) || !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Fatalf("err = %v, want a ValidationError at index 1 wrapping errNope", err)
	}
	// Check saw the messages as stored: defaults filled in.
	if len(seen) != 2 || seen[0].EventID == "" || seen[0].SchemaVersion != 1 || seen[0].ContentType != outbox.DefaultContentType {
		t.Errorf("Check saw %+v", seen)
	}
	if stats, err := st.Stats(ctx); err != nil || stats.New != 0 {
		t.Errorf("stats %+v, %v: want nothing written", stats, err)
	}
}
