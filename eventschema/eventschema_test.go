package eventschema_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/eventschema"
)

const orderPaidV1 = `{
	"type": "object",
	"required": ["order_id", "amount_cents"],
	"properties": {
		"order_id": {"type": "string"},
		"amount_cents": {"type": "integer", "minimum": 0},
		"customer": {
			"type": "object",
			"required": ["email"],
			"properties": {"email": {"type": "string", "format": "email"}}
		}
	}
}`

const orderPaidV2 = `{
	"type": "object",
	"required": ["order_id", "amount"],
	"additionalProperties": false,
	"properties": {
		"order_id": {"type": "string"},
		"amount": {
			"type": "object",
			"required": ["cents", "currency"],
			"properties": {
				"cents": {"type": "integer"},
				"currency": {"type": "string", "pattern": "^[A-Z]{3}$"}
			}
		}
	}
}`

func registry(t *testing.T) *eventschema.Registry {
	t.Helper()
	r := eventschema.New()
	if err := r.Register("OrderPaid", 1, []byte(orderPaidV1)); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("OrderPaid", 2, []byte(orderPaidV2)); err != nil {
		t.Fatal(err)
	}
	return r
}

func msg(version int, payload string) outbox.Message {
	return outbox.Message{Topic: "orders", Type: "OrderPaid", SchemaVersion: version, Payload: []byte(payload)}
}

// refused asserts err is a schema refusal of field with a reason containing
// want, and returns the violation.
func refused(t *testing.T, err error, field, want string) *eventschema.Violation {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want a refusal of %s (%s)", field, want)
	}
	var ve *outbox.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("%T %v is not a *outbox.ValidationError", err, err)
	}
	if ve.Field != field {
		t.Errorf("Field = %q, want %q (%v)", ve.Field, field, err)
	}
	if !errors.Is(err, outbox.ErrInvalidMessage) || !errors.Is(err, outbox.ErrSchemaViolation) {
		t.Errorf("errors.Is misses ErrInvalidMessage or ErrSchemaViolation: %v", err)
	}
	var v *eventschema.Violation
	if !errors.As(err, &v) {
		t.Fatalf("no *Violation in %v", err)
	}
	if !strings.Contains(v.Reason, want) || !strings.Contains(err.Error(), want) {
		t.Errorf("reason %q / error %q should contain %q", v.Reason, err, want)
	}
	if ve.Fix == "" {
		t.Errorf("no Fix in %v", err)
	}
	return v
}

func TestValid(t *testing.T) {
	r := registry(t)
	for _, m := range []outbox.Message{
		msg(1, `{"order_id":"o-1","amount_cents":1999}`),
		msg(0, `{"order_id":"o-1","amount_cents":1999,"customer":{"email":"a@example.com"}}`), // 0 means 1
		msg(2, `{"order_id":"o-1","amount":{"cents":1999,"currency":"EUR"}}`),
	} {
		if err := r.Check(m); err != nil {
			t.Errorf("v%d %s: %v", m.SchemaVersion, m.Payload, err)
		}
	}
}

func TestMissingRequiredField(t *testing.T) {
	v := refused(t, registry(t).Check(msg(1, `{"amount_cents":5}`)), "Payload/order_id", "missing property 'order_id'")
	if v.Pointer != "/order_id" || v.Type != "OrderPaid" || v.Version != 1 {
		t.Errorf("violation = %+v", v)
	}
	var full *jsonschema.ValidationError
	if !errors.As(v, &full) {
		t.Error("the validator's full report is not reachable with errors.As")
	}
}

func TestWrongType(t *testing.T) {
	err := registry(t).Check(msg(1, `{"order_id":"o-1","amount_cents":"19.99"}`))
	refused(t, err, "Payload/amount_cents", "got string, want integer")
	if !strings.Contains(err.Error(), "SchemaVersion") {
		t.Errorf("the error should say how to fix it (bump SchemaVersion): %v", err)
	}
}

func TestNestedFieldPointer(t *testing.T) {
	r := registry(t)
	refused(t, r.Check(msg(1, `{"order_id":"o-1","amount_cents":1,"customer":{"email":"nope"}}`)),
		"Payload/customer/email", "not valid email")
	refused(t, r.Check(msg(1, `{"order_id":"o-1","amount_cents":1,"customer":{}}`)),
		"Payload/customer/email", "missing property 'email'")
	refused(t, r.Check(msg(2, `{"order_id":"o-1","amount":{"cents":1,"currency":"eur"}}`)),
		"Payload/amount/currency", "does not match pattern")
}

func TestPointerEscaping(t *testing.T) {
	r := eventschema.New()
	if err := r.Register("X", 1, []byte(`{"properties":{"a/b~c":{"type":"integer"}}}`)); err != nil {
		t.Fatal(err)
	}
	v := refused(t, r.Check(outbox.Message{Type: "X", Payload: []byte(`{"a/b~c":true}`)}), "Payload/a~1b~0c", "got boolean, want integer")
	if v.Pointer != "/a~1b~0c" {
		t.Errorf("Pointer = %q", v.Pointer)
	}
}

func TestShallowestFailureFirst(t *testing.T) {
	// Two failures: the missing top-level property is reported, every time.
	for range 20 {
		refused(t, registry(t).Check(msg(1, `{"amount_cents":1,"customer":{"email":5}}`)), "Payload/order_id", "missing property 'order_id'")
	}
	// additionalProperties names the first extra property in order.
	for range 20 {
		refused(t, registry(t).Check(msg(2, `{"order_id":"o","amount":{"cents":1,"currency":"EUR"},"zz":1,"aa":2}`)),
			"Payload/aa", "additional properties 'aa', 'zz' not allowed")
	}
}

func TestInvalidJSON(t *testing.T) {
	r := registry(t)
	for payload, want := range map[string]string{
		`{"order_id":`: "not valid JSON: it ends too early",
		``:             "not valid JSON: it is empty",
		`{"a":1} {}`:   "not valid JSON",
		`{'a':1}`:      "not valid JSON: invalid character",
	} {
		v := refused(t, r.Check(msg(1, payload)), "Payload", want)
		if v.Pointer != "" {
			t.Errorf("%q: Pointer = %q, want the whole payload", payload, v.Pointer)
		}
	}
}

func TestUnknownPasses(t *testing.T) {
	r := registry(t)
	for _, m := range []outbox.Message{
		{Type: "OrderShipped", Payload: []byte(`not even JSON`)},                                // no schema for the type
		msg(3, `{"anything":true}`),                                                             // no schema for the version
		{Type: "", Payload: []byte(`{}`)},                                                       // no type
		{Type: "OrderPaid", ContentType: "application/x-protobuf", Payload: []byte{0x0a, 0x01}}, // not JSON
	} {
		if err := r.Check(m); err != nil {
			t.Errorf("%+v: %v", m, err)
		}
	}
}

func TestStrictRejectsUnknown(t *testing.T) {
	r := registry(t)
	r.Strict = true
	v := refused(t, r.Check(outbox.Message{Type: "OrderShipped", Payload: []byte(`{}`)}), "Type", "no schema")
	if !errors.Is(v, eventschema.ErrNoSchema) {
		t.Error("ErrNoSchema does not match")
	}
	err := r.Check(msg(3, `{}`))
	refused(t, err, "SchemaVersion", "no schema")
	if !strings.Contains(err.Error(), "v1, v2") {
		t.Errorf("the fix should list the registered versions: %v", err)
	}
	refused(t, r.Check(outbox.Message{Type: "OrderPaid", ContentType: "text/plain", Payload: []byte(`x`)}), "ContentType", "not JSON")
	if err := r.Check(msg(1, `{"order_id":"o","amount_cents":1}`)); err != nil {
		t.Errorf("a registered, valid message is refused: %v", err)
	}
}

func TestContentTypes(t *testing.T) {
	r := registry(t)
	bad := `{"order_id":1}`
	for _, ct := range []string{"", "application/json", "application/json; charset=utf-8", "Application/JSON", "application/cloudevents+json", "application/vnd.orders.v1+json"} {
		m := msg(1, bad)
		m.ContentType = ct
		if err := r.Check(m); !errors.Is(err, outbox.ErrSchemaViolation) {
			t.Errorf("content type %q: the schema was not applied (err %v)", ct, err)
		}
	}
	for _, ct := range []string{"text/plain", "application/x-protobuf", "application/jsonx", ";;bad"} {
		m := msg(1, bad)
		m.ContentType = ct
		if err := r.Check(m); err != nil {
			t.Errorf("content type %q: %v", ct, err)
		}
	}
}

func TestVersionsDiffer(t *testing.T) {
	r := registry(t)
	v1 := `{"order_id":"o-1","amount_cents":1999}`
	v2 := `{"order_id":"o-1","amount":{"cents":1999,"currency":"EUR"}}`
	if err := r.Check(msg(1, v1)); err != nil {
		t.Errorf("v1 payload as v1: %v", err)
	}
	if err := r.Check(msg(2, v2)); err != nil {
		t.Errorf("v2 payload as v2: %v", err)
	}
	refused(t, r.Check(msg(2, v1)), "Payload/amount", "missing property 'amount'")
	refused(t, r.Check(msg(1, v2)), "Payload/amount_cents", "missing property 'amount_cents'")
}

func TestRegisterBadSchema(t *testing.T) {
	r := eventschema.New()
	for _, tc := range []struct {
		name, typ string
		version   int
		schema    string
		want      string
	}{
		{"not JSON", "A", 1, `{"type":`, "not valid JSON"},
		{"unknown type", "A", 1, `{"type":"objekt"}`, "at /type: value must be one of"},
		{"bad regexp", "A", 1, `{"properties":{"x":{"pattern":"("}}}`, "at /properties/x/pattern"},
		{"external ref", "A", 1, `{"$ref":"other.json"}`, "self-contained"},
		{"file ref", "A", 1, `{"$ref":"file:///etc/passwd"}`, "self-contained"},
		{"empty type", "", 1, `{}`, "event type is empty"},
		{"negative version", "A", -1, `{}`, "version must be positive"},
	} {
		err := r.Register(tc.typ, tc.version, []byte(tc.schema))
		if !errors.Is(err, eventschema.ErrInvalidSchema) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrInvalidSchema mentioning %q", tc.name, err, tc.want)
		}
	}
	if err := r.Register("A", 0, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("A", 1, []byte(`{"type":"object"}`)); !errors.Is(err, eventschema.ErrInvalidSchema) || !strings.Contains(err.Error(), "registered already") {
		t.Errorf("re-registering A v1 (0 means 1): err = %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("MustRegister did not panic on a bad schema")
		}
	}()
	r.MustRegister("B", 1, []byte(`nope`))
}

func TestOlderDraft(t *testing.T) {
	r := eventschema.New()
	err := r.Register("A", 1, []byte(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"n":{"type":"integer","exclusiveMinimum":0}}}`))
	if err != nil {
		t.Fatal(err)
	}
	refused(t, r.Check(outbox.Message{Type: "A", Payload: []byte(`{"n":0}`)}), "Payload/n", "exclusiveMinimum")
}

func TestConcurrent(t *testing.T) {
	r := registry(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 50 {
				_ = r.Check(msg(1, `{"order_id":"o","amount_cents":-1}`))
				_ = r.Check(msg(3, `{}`))
			}
		})
		wg.Go(func() { _ = r.Register("T", i+1, []byte(`{"type":"object"}`)) })
	}
	wg.Wait()
	refused(t, r.Check(msg(1, `{"order_id":"o","amount_cents":-1}`)), "Payload/amount_cents", "minimum")
}
