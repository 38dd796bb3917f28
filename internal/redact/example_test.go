package redact_test

import (
	"errors"
	"fmt"

	"github.com/outbox-go/outbox/internal/redact"
)

func ExampleURL() {
	fmt.Println(redact.URL("postgres://app:s3cret@db1:5432,db2:5432/orders?sslmode=require&sslpassword=k"))
	fmt.Println(redact.URL("nats://TOKEN@127.0.0.1:4222"))
	fmt.Println(redact.URL("host=db user=app password='a b' dbname=orders"))
	fmt.Println(redact.URL("sqlite:/var/lib/outbox.db"))
	// Output:
	// postgres://app:xxxxx@db1:5432,db2:5432/orders?sslmode=require&sslpassword=xxxxx
	// nats://xxxxx@127.0.0.1:4222
	// host=db user=app password='xxxxx' dbname=orders
	// sqlite:/var/lib/outbox.db
}

func ExampleText() {
	raw := "postgres://postgres:post@127.0.0.1:1/test"
	// The password "post" is a part of "postgres": only its whole
	// occurrences in a secret position are masked.
	fmt.Println(redact.Text("failed to connect to `user=postgres database=test`: 127.0.0.1:1: refused", raw))
	fmt.Println(redact.Text(`parse "nats://u:p%zz@h:4222": invalid URL escape "%zz"`))
	// Output:
	// failed to connect to `user=postgres database=test`: 127.0.0.1:1: refused
	// parse "nats://u:xxxxx@h:4222": invalid URL escape "%zz"
}

func ExampleError() {
	raw := "nats://u:pw@127.0.0.1:4222"
	err := redact.Error(fmt.Errorf("connect %s: %w", raw, errors.ErrUnsupported), raw)
	fmt.Println(err)
	fmt.Println(errors.Is(err, errors.ErrUnsupported))
	// Output:
	// connect nats://u:xxxxx@127.0.0.1:4222: unsupported operation
	// true
}
