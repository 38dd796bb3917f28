// Package httpmsg builds an inbox.Message from a webhook request that the
// outbox relay's HTTP adapter (broker/httpbroker) sent, and verifies its
// Standard Webhooks signature, so a receiver never parses headers by hand.
//
// It reads the CloudEvents HTTP binding in binary mode: ce-id, ce-type,
// ce-source, ce-time, ce-partitionkey (the event key), ce-schemaversion
// and ce-aggregatetype, each percent-decoded as the binding requires, and
// Content-Type as the content type. The event id falls back to webhook-id
// when ce-id is absent. Other ce- attributes land in Message.Extensions.
// webhook-*, the names HTTP reserves (broker.ReservedHeaders(broker.HTTP))
// and the headers an HTTP client adds by itself (User-Agent,
// Accept-Encoding) are dropped; the rest are the producer's own headers,
// under lower-case names (HTTP names are case-insensitive, and HTTP/2
// sends them lower-case).
//
// A missing or malformed id, schema version or time is an error wrapping
// inbox.ErrMissingEventID or inbox.ErrMalformedHeader: answer 400, which
// the relay takes as permanent, rather than a 5xx it would retry.
package httpmsg

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/httpbroker"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/internal/ceattr"
)

// DefaultTolerance is how far a webhook-timestamp may be from now for
// Verify: five minutes, as Standard Webhooks recommends.
const DefaultTolerance = 5 * time.Minute

// MaxBody is the largest body ReadRequest reads (8 MiB).
const MaxBody = 8 << 20

var (
	// ErrNoSignature is returned by Verify when a webhook-* header is missing.
	ErrNoSignature = errors.New("httpmsg: the request is not signed (webhook-id, webhook-timestamp or webhook-signature missing)")
	// ErrBadSignature is returned by Verify when no signature matches.
	ErrBadSignature = errors.New("httpmsg: no webhook-signature matches the body under the secret")
	// ErrStale is returned by Verify for a timestamp outside the tolerance:
	// a replayed request, or clocks far apart.
	ErrStale = errors.New("httpmsg: webhook-timestamp is too far from now")
)

// Verify checks h's Standard Webhooks signature of body under secret
// (whsec_…): one of the space-separated v1 signatures in webhook-signature
// must be the HMAC-SHA256 of webhook-id.webhook-timestamp.body, compared
// in constant time, and the timestamp within tolerance of now (0 means
// DefaultTolerance). Verify before trusting anything in the request.
func Verify(secret string, h http.Header, body []byte, tolerance time.Duration) error {
	key, err := httpbroker.DecodeSecret(secret)
	if err != nil {
		return err
	}
	id, ts, sigs := h.Get(httpbroker.HeaderID), h.Get(httpbroker.HeaderTimestamp), h.Get(httpbroker.HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrNoSignature
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not Unix seconds", ErrStale, ts)
	}
	if d := time.Since(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %v away, tolerance %v", ErrStale, d.Round(time.Second), tolerance)
	}
	want := []byte(httpbroker.Sign(key, id, ts, body))
	for _, s := range strings.Fields(sigs) {
		if hmac.Equal([]byte(s), want) {
			return nil
		}
	}
	return ErrBadSignature
}

// ReadRequest reads r's body (at most MaxBody bytes), verifies its
// signature when secret is not empty, and builds the message, with Topic
// set to topic (the receiver knows which part of its URL the relay filled
// in).
func ReadRequest(r *http.Request, topic, secret string) (inbox.Message, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		return inbox.Message{}, fmt.Errorf("httpmsg: reading the body: %w", err)
	}
	if len(body) > MaxBody {
		return inbox.Message{}, fmt.Errorf("httpmsg: the body is larger than %d bytes", MaxBody)
	}
	if secret != "" {
		if err := Verify(secret, r.Header, body, 0); err != nil {
			return inbox.Message{}, err
		}
	}
	return FromHeader(topic, r.Header, body)
}

// FromHeader builds an inbox.Message from a request's headers and body
// (kept as Payload without copying).
func FromHeader(topic string, h http.Header, body []byte) (inbox.Message, error) {
	var b ceattr.Builder
	b.Msg.Topic, b.Msg.Payload = topic, body
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	sort.Strings(names)
	var webhookID, contentType string
	for _, name := range names {
		vals := h[name]
		if len(vals) == 0 {
			continue
		}
		lower := strings.ToLower(name)
		switch {
		case strings.HasPrefix(lower, httpbroker.HeaderPrefix):
			attr := lower[len(httpbroker.HeaderPrefix):]
			if attr == "" {
				continue
			}
			for _, v := range vals {
				dec, err := broker.PercentDecode(v)
				if err != nil {
					b.Fail(inbox.NewHeaderError(name, v, err))
					break
				}
				b.Attr(name, attr, dec)
			}
		case lower == httpbroker.HeaderID:
			webhookID = vals[0]
		case lower == "content-type":
			contentType = vals[0]
		case lower == "user-agent", lower == "accept-encoding", broker.IsReservedHeader(broker.HTTP, name):
		default:
			b.Header(lower, vals[0])
		}
	}
	if !b.Has(broker.AttrID) && webhookID != "" {
		b.Attr(httpbroker.HeaderID, broker.AttrID, webhookID)
	}
	if contentType != "" {
		b.Msg.ContentType = contentType
	}
	return b.Finish("the ce-id and webhook-id headers")
}
