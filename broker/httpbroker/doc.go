// Package httpbroker delivers outbox events as HTTP POSTs to a webhook
// endpoint, in the CloudEvents HTTP binding's binary mode, signed the
// Standard Webhooks way when a secret is set.
//
// # Request mapping
//
// The URL is the template given to Dial or New with {topic} replaced by
// the event's topic (path-escaped in the path, query-escaped in the query):
// https://hooks.example/{topic}. The body is the payload, byte for byte.
// Headers (CloudEvents attribute values percent-encoded as the binding
// requires, so plain identifiers arrive unchanged):
//
//	Content-Type        ContentType (default application/json): the datacontenttype attribute
//	ce-id               EventID
//	ce-source           Config.Source (default "outbox")
//	ce-specversion      1.0
//	ce-type             Type
//	ce-time             CreatedAt, RFC 3339 in UTC (left out when zero)
//	ce-partitionkey     Key (left out when empty)
//	ce-schemaversion    SchemaVersion (left out when 0)
//	ce-aggregatetype    AggregateType (left out when empty)
//	webhook-id          EventID (with a secret; the same on every retry)
//	webhook-timestamp   this attempt's time, Unix seconds (with a secret)
//	webhook-signature   v1,<base64 HMAC-SHA256 of "webhook-id.webhook-timestamp.body"> (with a secret)
//	<user headers>      Headers, names and values as given
//
// The key of the HMAC is the secret's base64 part after whsec_
// (DecodeSecret); a receiver verifies with any Standard Webhooks library,
// or with inbox/httpmsg. User headers that HTTP reserves
// (broker.ReservedHeaders(broker.HTTP): Content-Type, ce-*, webhook-*,
// Content-Length, Transfer-Encoding, Host and the other framing and
// hop-by-hop headers) are refused (permanent), never sent or dropped;
// Check refuses them at enqueue.
//
// # Answers
//
// 2xx confirms the event. 4xx other than 408 and 429 is permanent
// (ErrRejected): the relay buries the event with the status and the start
// of the body. A redirect (3xx) is not followed and is permanent
// (ErrRedirected): a POST that follows a redirect may arrive as a GET
// without its body. 408, 429 and 5xx are transient; with a Retry-After
// (seconds or an HTTP date) the error carries that delay
// (broker.RetryAfter, capped at Config.MaxRetryAfter) and the relay does
// not try the event again sooner. No answer within Config.Timeout, or a
// connection broken mid-request, is transient (the endpoint may have
// received it: it deduplicates on webhook-id or ce-id). An endpoint that
// cannot be reached at all (refused, no such host, a certificate that does
// not verify) wraps broker.ErrUnavailable, so an outage makes nothing DEAD.
//
// # Order and concurrency
//
// A Publish call sends each key's events one after the other, in slice
// order, the next only after the one before was answered 2xx, and none of
// a key after one that failed (those get a transient error and the relay
// gives them back untried). Different keys and keyless events go in
// parallel: at most Config.MaxInFlight requests (16) across all calls,
// which Features declares so the relay sizes its waves to it. Features
// declares OrderKey: the relay can send all of a key's events in one call.
// What the receiver does with concurrent requests of different keys is up
// to it.
//
// # Connection
//
// Dial builds a client of its own: Go's default transport (TLS verifying
// certificates against the system roots, or Config.TLSConfig), keep-alive,
// no redirects followed. A webhook_secret= query parameter in Dial's URL
// is taken out as Config.Secret, so the secret is never sent. Errors name
// the endpoint with its secrets masked (internal/redact). New takes an
// *http.Client the caller owns.
package httpbroker
