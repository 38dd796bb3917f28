package httpbroker

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/internal/redact"
)

// Header names the Broker sets. The CloudEvents attributes go as
// HeaderPrefix + name (ce-id, ce-type, …), percent-encoded as the HTTP
// binding asks; datacontenttype goes as Content-Type.
const (
	HeaderPrefix    = "ce-"
	HeaderID        = "webhook-id"        // EventID, stable across retries
	HeaderTimestamp = "webhook-timestamp" // Unix seconds of this attempt
	HeaderSignature = "webhook-signature" // v1,<base64 HMAC-SHA256 of id.timestamp.body>
)

// maxDrain is how much of a response body is read so that the connection
// can be reused; the rest is dropped with the connection.
const maxDrain = 64 << 10

// Publish POSTs every event and returns one result each: nil once the
// endpoint answered 2xx. The events of one key go one after the other, in
// slice order, and after one of them failed the rest of that key are not
// sent (a transient error says so); other keys and keyless events go in
// parallel, at most Config.MaxInFlight requests at once across calls.
func (b *Broker) Publish(ctx context.Context, events []outbox.Event) []error {
	results := make([]error, len(events))
	if len(events) == 0 {
		return results
	}
	if !b.gate.Enter() {
		return broker.Fill(len(events), ErrClosed)
	}
	defer b.gate.Leave()
	if err := ctx.Err(); err != nil {
		return broker.Fill(len(events), fmt.Errorf("httpbroker: not sent: %w", err))
	}

	// chains: each key's events in order, and each keyless event alone
	var chains [][]int
	byKey := make(map[string]int)
	for i := range events {
		k := events[i].Key
		if k == "" {
			chains = append(chains, []int{i})
			continue
		}
		c, ok := byKey[k]
		if !ok {
			c = len(chains)
			byKey[k] = c
			chains = append(chains, nil)
		}
		chains[c] = append(chains[c], i)
	}
	work := make(chan []int)
	done := make(chan struct{})
	workers := min(len(chains), b.cfg.MaxInFlight)
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for chain := range work {
				b.runChain(ctx, events, chain, results)
			}
		}()
	}
	for _, c := range chains {
		work <- c
	}
	close(work)
	for range workers {
		<-done
	}
	return results
}

// runChain sends one key's events in order, stopping at the first failure.
func (b *Broker) runChain(ctx context.Context, events []outbox.Event, chain []int, results []error) {
	for n, i := range chain {
		results[i] = b.send(ctx, &events[i])
		if results[i] != nil && n+1 < len(chain) {
			held := fmt.Errorf("httpbroker: not sent: event %s of the same key failed before it, and a key's events go in order", events[i].EventID)
			for _, j := range chain[n+1:] {
				results[j] = held
			}
			return
		}
	}
}

// send POSTs one event, holding one of the MaxInFlight slots.
func (b *Broker) send(ctx context.Context, e *outbox.Event) error {
	req, err := b.request(ctx, e)
	if err != nil {
		return err
	}
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("httpbroker: event %s not sent, waiting for one of the %d requests in flight to end: %w", e.EventID, b.cfg.MaxInFlight, ctx.Err())
	}
	defer func() { <-b.slots }()
	rctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	b.sign(req, e)
	resp, err := b.client.Do(req.WithContext(rctx))
	if err != nil {
		return b.transportError(ctx, e, req.URL.String(), err)
	}
	snippet := drain(resp)
	return b.statusError(e, req.URL.String(), resp, snippet)
}

// request builds e's POST without the signature (which is made at send
// time, when the timestamp is taken), or the permanent error of an event
// that cannot be sent.
func (b *Broker) request(ctx context.Context, e *outbox.Event) (*http.Request, error) {
	if err := broker.CheckEvent(broker.HTTP, e); err != nil {
		return nil, broker.Permanent(fmt.Errorf("httpbroker: event %s: %w", e.EventID, err))
	}
	if e.Topic == "" && b.target.has {
		return nil, broker.Permanentf("httpbroker: event %s: the topic is empty and the URL %s needs one for %s: %w", e.EventID, redact.URL(b.target.raw), TopicPlaceholder, outbox.ErrInvalidMessage)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.target.url(e.Topic), bytes.NewReader(e.Payload))
	if err != nil {
		return nil, broker.Permanentf("httpbroker: event %s: topic %q does not make a URL: %v", e.EventID, e.Topic, redact.Error(err, b.target.raw))
	}
	h := req.Header
	size := len(e.Payload)
	for _, a := range broker.CloudEventAttributes(*e, b.cfg.Source) {
		if a.Name == broker.AttrDataContentType {
			h["Content-Type"] = []string{a.Value}
			size += len("Content-Type") + len(a.Value)
			continue
		}
		v := b.source
		if a.Name != broker.AttrSource {
			v = broker.PercentEncode(a.Value)
		}
		h[HeaderPrefix+a.Name] = []string{v}
		size += len(HeaderPrefix) + len(a.Name) + len(v)
	}
	for k, v := range e.Headers {
		h.Add(k, v)
		size += len(k) + len(v)
	}
	if b.cfg.MaxMessage > 0 && size > b.cfg.MaxMessage {
		return nil, broker.Permanentf("httpbroker: event %s: its %d-byte payload plus %d bytes of headers is above the limit of %d (Config.MaxMessage) (%w); store large data elsewhere and send a reference",
			e.EventID, len(e.Payload), size-len(e.Payload), b.cfg.MaxMessage, outbox.ErrPayloadTooLarge)
	}
	req.ContentLength = int64(len(e.Payload))
	return req, nil
}

// sign sets the Standard Webhooks headers: the event id, this attempt's
// time, and the HMAC-SHA256 of "id.timestamp.body" under the secret's key.
func (b *Broker) sign(req *http.Request, e *outbox.Event) {
	if b.key == nil {
		return
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header[HeaderID] = []string{e.EventID}
	req.Header[HeaderTimestamp] = []string{ts}
	req.Header[HeaderSignature] = []string{Sign(b.key, e.EventID, ts, e.Payload)}
}

// Sign returns the webhook-signature value for a message: "v1," and the
// base64 HMAC-SHA256 of id + "." + timestamp + "." + body under key (see
// DecodeSecret).
func Sign(key []byte, id, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// drain reads a little of the body, for the error, and the rest up to
// maxDrain so the connection can carry the next request.
func drain(resp *http.Response) string {
	defer resp.Body.Close()
	var head [200]byte
	n, _ := io.ReadFull(resp.Body, head[:])
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	return sanitize(head[:n])
}

// sanitize keeps printable text of a response body for an error message.
func sanitize(b []byte) string {
	s := strings.ToValidUTF8(string(b), "?")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// statusError classifies the endpoint's answer.
func (b *Broker) statusError(e *outbox.Event, target string, resp *http.Response, body string) error {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	where := redact.URL(target)
	said := ""
	if body != "" {
		said = fmt.Sprintf(" (%q)", body)
	}
	switch {
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		err := fmt.Errorf("httpbroker: event %s: POST %s: %s%s; retrying later", e.EventID, where, resp.Status, said)
		if d := retryAfter(resp.Header.Get("Retry-After"), time.Now()); d > 0 {
			d = min(d, b.cfg.MaxRetryAfter)
			return broker.RetryAfter(fmt.Errorf("%w, not before %v (Retry-After)", err, d.Round(time.Second)), d)
		}
		return err
	case code >= 300 && code < 400:
		loc := redact.URL(resp.Header.Get("Location"))
		return broker.Permanentf("httpbroker: event %s: POST %s: %s to %q: %w; redirects are not followed, put the final URL in the broker URL", e.EventID, where, resp.Status, loc, ErrRedirected)
	case code >= 400 && code < 500:
		return broker.Permanentf("httpbroker: event %s: POST %s: %s%s: %w", e.EventID, where, resp.Status, said, ErrRejected)
	}
	return fmt.Errorf("httpbroker: event %s: POST %s: unexpected status %s%s; retrying later", e.EventID, where, resp.Status, said)
}

// retryAfter reads a Retry-After value: a number of seconds or an HTTP
// date. 0 when absent, malformed or past.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(1<<62)/int64(time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// transportError classifies a request that got no response. The URL the
// client quotes (*url.Error) is left out: it is shown redacted instead.
func (b *Broker) transportError(ctx context.Context, e *outbox.Event, target string, err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	err = redact.Error(err, target, b.target.raw)
	where := redact.URL(target)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("httpbroker: event %s: POST %s: no response before the deadline (it may have been received): %w", e.EventID, where, ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("httpbroker: event %s: POST %s: no response within %v (Config.Timeout; it may have been received); retrying later: %w", e.EventID, where, b.cfg.Timeout, err)
	case isDialError(err):
		return fmt.Errorf("httpbroker: event %s: POST %s: cannot reach the endpoint: %w (%w)", e.EventID, where, err, broker.ErrUnavailable)
	}
	return fmt.Errorf("httpbroker: event %s: POST %s: %w; retrying later", e.EventID, where, err)
}
