package eventschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	outbox "github.com/outbox-go/outbox"
)

var (
	// ErrInvalidSchema is returned by Register for a schema that is not
	// valid JSON, does not compile, or is registered twice.
	ErrInvalidSchema = errors.New("eventschema: invalid schema")
	// ErrNoSchema is what a Strict registry refuses a message for when no
	// schema checks it. It is wrapped in a *Violation, so
	// outbox.ErrSchemaViolation matches too.
	ErrNoSchema = errors.New("eventschema: no schema registered for this event type and version")
)

// Registry holds the JSON Schemas of event payloads by (event type, schema
// version). It is safe for concurrent use; set Strict before using it.
type Registry struct {
	// Strict refuses messages that no schema checks: those whose
	// (Type, SchemaVersion) has no registered schema, and those whose
	// ContentType is not JSON. Default false: they pass unchecked.
	Strict bool

	mu      sync.RWMutex
	schemas map[key]*jsonschema.Schema
}

type key struct {
	eventType string
	version   int
}

// New returns an empty registry.
func New() *Registry {
	return &Registry{schemas: map[key]*jsonschema.Schema{}}
}

// Register compiles schema (a JSON Schema document) and registers it for
// messages of eventType with SchemaVersion version (0 means 1, as for
// messages). A schema that is not valid JSON or does not compile, or a
// (type, version) that already has one, is an error wrapping
// ErrInvalidSchema: a published version's schema never changes; register the
// new shape under the next version.
func (r *Registry) Register(eventType string, version int, schema []byte) error {
	if version == 0 {
		version = 1
	}
	name := fmt.Sprintf("%s v%d", eventType, version)
	switch {
	case eventType == "":
		return fmt.Errorf("%w: the event type is empty; use the Message.Type the schema is for", ErrInvalidSchema)
	case version < 0:
		return fmt.Errorf("%w: %s: the version must be positive (or 0, meaning 1)", ErrInvalidSchema, name)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return fmt.Errorf("%w: %s: the schema is not valid JSON: %s", ErrInvalidSchema, name, jsonReason(err))
	}
	loc := "eventschema:///" + url.PathEscape(eventType) + "/v" + strconv.Itoa(version) + ".json"
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.UseLoader(noLoader{})
	if err := c.AddResource(loc, doc); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidSchema, name, err)
	}
	sch, err := c.Compile(loc)
	var sve *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	switch {
	case errors.As(err, &sve) && errors.As(sve.Err, &ve):
		ptr, reason := firstFailure(ve)
		if ptr == "" {
			ptr = "its root"
		}
		return fmt.Errorf("%w: %s: the schema is not valid JSON Schema: at %s: %s", ErrInvalidSchema, name, ptr, reason)
	case err != nil:
		return fmt.Errorf("%w: %s does not compile: %w", ErrInvalidSchema, name, err)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.schemas == nil {
		r.schemas = map[key]*jsonschema.Schema{}
	}
	k := key{eventType, version}
	if _, dup := r.schemas[k]; dup {
		return fmt.Errorf("%w: %s is registered already; a changed schema needs a new SchemaVersion", ErrInvalidSchema, name)
	}
	r.schemas[k] = sch
	return nil
}

// MustRegister is Register that panics on error, for schemas fixed at
// program start.
func (r *Registry) MustRegister(eventType string, version int, schema []byte) {
	if err := r.Register(eventType, version, schema); err != nil {
		panic(err)
	}
}

// noLoader keeps schemas self-contained: nothing is read from files or the
// network while compiling.
type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("%s is not loaded: registered schemas must be self-contained; put shared parts under $defs", u)
}

// Violation is the Err of the *outbox.ValidationError that Check returns.
// errors.Is matches outbox.ErrSchemaViolation, and errors.As reaches the
// validator's full report (*jsonschema.ValidationError) when there is one.
type Violation struct {
	Type    string // the message's Type
	Version int    // its SchemaVersion (0 reported as 1)
	// Pointer is the JSON pointer (RFC 6901) of the failing value within
	// the payload, e.g. "/amount_cents"; empty for the payload as a whole.
	Pointer string
	// Reason is what is wrong there, e.g. "missing property 'order_id'" or
	// "got string, want integer".
	Reason string
	// Cause is the underlying error: *jsonschema.ValidationError with
	// every failure, the JSON syntax error, or ErrNoSchema.
	Cause error
}

func (v *Violation) Error() string {
	return fmt.Sprintf("%v (%s v%d): %s", outbox.ErrSchemaViolation, v.Type, v.Version, v.Reason)
}

// Unwrap lets errors.Is match outbox.ErrSchemaViolation and the cause.
func (v *Violation) Unwrap() []error {
	if v.Cause == nil {
		return []error{outbox.ErrSchemaViolation}
	}
	return []error{outbox.ErrSchemaViolation, v.Cause}
}

const fixSchema = "fix the payload or, if the event's shape changed on purpose, bump SchemaVersion and register the new schema for that version"

// Check validates m's payload against the schema registered for
// (m.Type, m.SchemaVersion). Its signature fits store.Options.Check.
//
// A message without a schema, or whose ContentType is not JSON, passes
// unless Strict is set. Otherwise a payload that is not JSON or does not
// match returns a *outbox.ValidationError (Index 0; the store sets the real
// one) whose Field is "Payload" plus the JSON pointer of the failing value,
// whose Err is a *Violation, and whose Fix says what to do.
func (r *Registry) Check(m outbox.Message) error {
	version := m.SchemaVersion
	if version == 0 {
		version = 1
	}
	r.mu.RLock()
	sch := r.schemas[key{m.Type, version}]
	r.mu.RUnlock()

	refuse := func(field, ptr, reason string, cause error, fix string) error {
		return &outbox.ValidationError{Field: field, Fix: fix,
			Err: &Violation{Type: m.Type, Version: version, Pointer: ptr, Reason: reason, Cause: cause}}
	}
	if !isJSON(m.ContentType) {
		if !r.Strict {
			return nil
		}
		return refuse("ContentType", "", fmt.Sprintf("content type %q is not JSON, so no schema can check it", m.ContentType), ErrNoSchema,
			"send JSON (application/json or a +json type), or turn Registry.Strict off to let other payloads through unchecked")
	}
	if sch == nil {
		if !r.Strict {
			return nil
		}
		if vs := r.versions(m.Type); len(vs) > 0 {
			return refuse("SchemaVersion", "", "no schema is registered for this version", ErrNoSchema,
				fmt.Sprintf("register a schema for %s v%d, or send one of the registered versions (%s)", m.Type, version, vs))
		}
		return refuse("Type", "", "no schema is registered for this event type", ErrNoSchema,
			fmt.Sprintf("register a schema for %s v%d before enqueueing it, or turn Registry.Strict off", m.Type, version))
	}

	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(m.Payload))
	if err != nil {
		return refuse("Payload", "", "not valid JSON: "+jsonReason(err), err,
			"send valid JSON, or set ContentType to the payload's real type if it is not JSON")
	}
	err = sch.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) { // not expected from Validate
		return refuse("Payload", "", err.Error(), err, fixSchema)
	}
	ptr, reason := firstFailure(ve)
	return refuse("Payload"+ptr, ptr, reason, ve, fixSchema)
}

// versions lists the registered versions of eventType, e.g. "v1, v2".
func (r *Registry) versions(eventType string) string {
	r.mu.RLock()
	var vs []int
	for k := range r.schemas {
		if k.eventType == eventType {
			vs = append(vs, k.version)
		}
	}
	r.mu.RUnlock()
	slices.Sort(vs)
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = "v" + strconv.Itoa(v)
	}
	return strings.Join(s, ", ")
}

// isJSON reports whether a content type says JSON; empty means the default,
// application/json.
func isJSON(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func jsonReason(err error) string {
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF):
		return "it is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "it ends too early"
	case errors.As(err, &se):
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	}
	return err.Error()
}

var printer = message.NewPrinter(language.English)

// firstFailure picks the failure to report among the validator's: the
// shallowest in the payload (a missing top-level property before a wrong
// nested value), then the first by pointer (the validator visits
// properties in map order), then the first the validator reports there. The pointer names the offending property itself for
// required, dependentRequired and additionalProperties failures, which the
// validator reports at the enclosing object.
func firstFailure(ve *jsonschema.ValidationError) (ptr, reason string) {
	type failure struct {
		depth, order int
		ptr, reason  string
	}
	var all []failure
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		loc := slices.Clone(e.InstanceLocation)
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			if len(k.Missing) > 0 {
				loc = append(loc, k.Missing[0])
			}
		case *kind.DependentRequired:
			if len(k.Missing) > 0 {
				loc = append(loc, k.Missing[0])
			}
		case *kind.Dependency:
			if len(k.Missing) > 0 {
				loc = append(loc, k.Missing[0])
			}
		case *kind.AdditionalProperties:
			slices.Sort(k.Properties) // the validator's order follows a map
			if len(k.Properties) > 0 {
				loc = append(loc, k.Properties[0])
			}
		}
		all = append(all, failure{len(loc), len(all), pointer(loc), e.ErrorKind.LocalizedString(printer)})
	}
	walk(ve)
	if len(all) == 0 { // not expected: a failure always has a leaf
		return pointer(ve.InstanceLocation), ve.ErrorKind.LocalizedString(printer)
	}
	best := slices.MinFunc(all, func(a, b failure) int {
		if a.depth != b.depth {
			return a.depth - b.depth
		}
		if c := strings.Compare(a.ptr, b.ptr); c != 0 {
			return c
		}
		return a.order - b.order
	})
	return best.ptr, best.reason
}

var escaper = strings.NewReplacer("~", "~0", "/", "~1")

// pointer encodes tokens as a JSON pointer (RFC 6901).
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escaper.Replace(t))
	}
	return b.String()
}
