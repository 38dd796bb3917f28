package redisbroker

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// The fields of a stream entry. Every name without a colon belongs to the
// adapter; user headers are HeaderPrefix + name, and a header name cannot
// hold a colon (it is an HTTP token), so the two never collide.
const (
	FieldData          = "data"             // the payload, byte for byte
	FieldID            = "ce_id"            // Event.EventID
	FieldType          = "ce_type"          // Event.Type
	FieldSource        = "ce_source"        // Config.Source
	FieldSpecVersion   = "ce_specversion"   // "1.0"
	FieldTime          = "ce_time"          // Event.CreatedAt, RFC 3339 UTC; absent when zero
	FieldContentType   = "content_type"     // Event.ContentType (default application/json)
	FieldKey           = "key"              // Event.Key; absent when empty
	FieldSchemaVersion = "ce_schemaversion" // Event.SchemaVersion; absent when 0
	FieldAggregateType = "ce_aggregatetype" // Event.AggregateType; absent when empty
	// HeaderPrefix starts the field of each user header: h:traceparent.
	HeaderPrefix = "h:"
)

// fieldOf maps a CloudEvents attribute to its field.
var fieldOf = map[string]string{
	broker.AttrID: FieldID, broker.AttrSource: FieldSource, broker.AttrSpecVersion: FieldSpecVersion,
	broker.AttrType: FieldType, broker.AttrTime: FieldTime, broker.AttrDataContentType: FieldContentType,
	broker.AttrPartitionKey: FieldKey, broker.AttrSchemaVersion: FieldSchemaVersion,
	broker.AttrAggregateType: FieldAggregateType,
}

// maxFields bounds the fields of one entry: the dedup script passes them to
// XADD through Lua's unpack, whose stack holds about 8,000 values.
const maxFields = 3000

// addScript adds one entry unless its event id was added within the dedup
// window, atomically: Redis runs a script without interleaving other
// commands, so no second relay can add the same event between the GET and
// the XADD. KEYS[1] is the stream, KEYS[2] the dedup key (in the stream's
// hash slot); ARGV[1] the window in seconds, ARGV[2] MAXLEN (0 = no
// trimming), the rest the entry's fields and values. It returns
// {0, entry id} when it added the entry, {1, first entry id} when the
// event was there already.
const addScript = `local prev = redis.call('GET', KEYS[2])
if prev then return {1, prev} end
local id
if ARGV[2] ~= '0' then
  id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 3))
else
  id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))
end
redis.call('SET', KEYS[2], id, 'EX', ARGV[1])
return {0, id}`

var addScriptSHA = func() string {
	h := sha1.Sum([]byte(addScript))
	return hex.EncodeToString(h[:])
}()

// Publish adds each event to the stream named by its topic, all in one
// pipeline, and waits for every reply. See PublishResults.
func (b *Broker) Publish(ctx context.Context, events []outbox.Event) []error {
	res := b.PublishResults(ctx, events)
	out := make([]error, len(res))
	for i := range res {
		out[i] = res[i].Err
	}
	return out
}

var _ broker.ResultPublisher = (*Broker)(nil)

// PublishResults adds the events in one pipeline on one connection and
// returns, for each, the stream and the entry id Redis assigned (Result.ID,
// with its sequence part in Result.Sequence), or the entry id it was first
// stored under with Duplicate set when the dedup window remembered its
// event id. An event that cannot be sent (not a valid CloudEvent, a
// reserved header, too large, an empty topic) gets a permanent error and is
// not sent; the others still are.
func (b *Broker) PublishResults(ctx context.Context, events []outbox.Event) []broker.Result {
	res := make([]broker.Result, len(events))
	for i := range res {
		res[i].Offset = -1
	}
	if len(events) == 0 {
		return res
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		fillResults(res, ErrClosed)
		return res
	}
	b.inflight.Add(1)
	b.mu.Unlock()
	defer b.inflight.Done()
	if err := ctx.Err(); err != nil {
		fillResults(res, fmt.Errorf("redisbroker: not published: %w", err))
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()

	msgs := make([][]any, len(events))
	for i := range events {
		args, err := b.message(&events[i])
		if err != nil {
			res[i].Err = err
			continue
		}
		msgs[i] = args
	}
	b.send(ctx, events, msgs, res, false)
	return res
}

// send runs one pipeline for the events whose msgs entry is set. When the
// server has lost the dedup script (a restart, SCRIPT FLUSH), those events
// did not run: it loads the script and sends them again, once.
func (b *Broker) send(ctx context.Context, events []outbox.Event, msgs [][]any, res []broker.Result, again bool) {
	pipe := b.rdb.Pipeline()
	cmds := make([]redis.Cmder, len(events))
	for i, args := range msgs {
		if args == nil {
			continue
		}
		stream := events[i].Topic
		if b.cfg.NoDedup {
			cmds[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, MaxLen: b.cfg.MaxLen, Approx: b.cfg.MaxLen > 0, Values: args[2:]})
		} else {
			cmds[i] = pipe.EvalSha(ctx, addScriptSHA, []string{stream, b.dedupKey(stream, events[i].EventID)}, args...)
		}
	}
	if pipe.Len() == 0 {
		return
	}
	_, _ = pipe.Exec(ctx) // each command carries its own reply or error
	var lost [][]any
	for i, c := range cmds {
		if c == nil {
			continue
		}
		if err := c.Err(); err != nil {
			if !again && redis.HasErrorPrefix(err, "NOSCRIPT") {
				if lost == nil {
					lost = make([][]any, len(events))
				}
				lost[i] = msgs[i]
				continue
			}
			res[i].Err = b.classify(ctx, &events[i], err)
			continue
		}
		res[i] = b.reply(&events[i], c)
	}
	if lost != nil {
		if err := b.rdb.ScriptLoad(ctx, addScript).Err(); err != nil {
			for i := range lost {
				if lost[i] != nil {
					res[i].Err = b.classify(ctx, &events[i], fmt.Errorf("loading the dedup script: %w", err))
				}
			}
			return
		}
		b.send(ctx, events, lost, res, true)
	}
}

// reply reads a command's successful reply.
func (b *Broker) reply(e *outbox.Event, c redis.Cmder) broker.Result {
	r := broker.Result{Stream: e.Topic, Offset: -1}
	switch c := c.(type) {
	case *redis.StringCmd: // XADD
		r.ID = c.Val()
	case *redis.Cmd: // the dedup script
		v, ok := c.Val().([]any)
		if len(v) == 2 {
			dup, ok1 := v[0].(int64)
			id, ok2 := v[1].(string)
			ok = ok1 && ok2
			r.Duplicate, r.ID = dup == 1, id
		}
		if !ok {
			r.Err = fmt.Errorf("redisbroker: event %s on %q: unexpected reply %v from the dedup script; was it stored? retry later", e.EventID, e.Topic, c.Val())
			return r
		}
	}
	if _, seq, ok := strings.Cut(r.ID, "-"); ok {
		r.Sequence, _ = strconv.ParseUint(seq, 10, 64)
	}
	return r
}

// classify turns a command's error into the event's result.
func (b *Broker) classify(ctx context.Context, e *outbox.Event, err error) error {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		switch {
		case redis.HasErrorPrefix(err, "WRONGTYPE"):
			return broker.Permanentf("redisbroker: event %s: the key %q %w; choose another topic, or delete or rename that key: %w", e.EventID, e.Topic, ErrNotStream, err)
		case redis.HasErrorPrefix(err, "CROSSSLOT"):
			return broker.Permanentf("redisbroker: event %s on %q: the stream and its dedup key are in different cluster slots (a '}' in the topic without a hash tag); rename the topic or set NoDedup: %w", e.EventID, e.Topic, err)
		case redis.HasErrorPrefix(err, "OOM"):
			return fmt.Errorf("redisbroker: event %s on %q not added: Redis is at its maxmemory limit; trim streams (maxlen=) or raise maxmemory; retry later: %w", e.EventID, e.Topic, err)
		case redis.HasErrorPrefix(err, "LOADING"), redis.HasErrorPrefix(err, "MASTERDOWN"), redis.HasErrorPrefix(err, "CLUSTERDOWN"),
			redis.HasErrorPrefix(err, "TRYAGAIN"), redis.HasErrorPrefix(err, "READONLY"), redis.HasErrorPrefix(err, "BUSY"):
			return fmt.Errorf("redisbroker: event %s on %q not added: the server cannot take writes now (%w): %w", e.EventID, e.Topic, broker.ErrUnavailable, err)
		}
		return fmt.Errorf("redisbroker: event %s on %q refused by Redis; retry later: %w", e.EventID, e.Topic, err)
	}
	if errors.Is(err, redis.ErrClosed) {
		return ErrClosed
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("redisbroker: no reply for event %s on %q before the deadline (it may have been added): %w", e.EventID, e.Topic, cerr)
	}
	// The connection failed (refused, reset, timed out): the event may or
	// may not have been added; sending it again is safe with dedup.
	return fmt.Errorf("redisbroker: event %s on %q not confirmed: %w (%w); it reconnects by itself, retry later", e.EventID, e.Topic, err, broker.ErrUnavailable)
}

// message returns the script's arguments for e: the window, MAXLEN, then
// the entry's fields and values (args[2:], XADD's own when NoDedup).
func (b *Broker) message(e *outbox.Event) ([]any, error) {
	if err := broker.CheckEvent(broker.Redis, e); err != nil {
		return nil, broker.Permanent(fmt.Errorf("redisbroker: event %s: %w", e.EventID, err))
	}
	if e.Topic == "" {
		return nil, broker.Permanentf("redisbroker: event %s: %w: it is empty; set the topic to the stream's name", e.EventID, ErrInvalidTopic)
	}
	if n := 10 + len(e.Headers); n > maxFields {
		return nil, broker.Permanentf("redisbroker: event %s has %d headers; a stream entry from the relay holds at most %d: %w", e.EventID, len(e.Headers), maxFields-10, outbox.ErrInvalidMessage)
	}
	var attrs [9]broker.Attribute
	args := make([]any, 0, 4+2*(len(attrs)+len(e.Headers)))
	args = append(args, b.ttl, strconv.FormatInt(b.cfg.MaxLen, 10), FieldData, e.Payload)
	size := len(FieldData) + len(e.Payload)
	for _, a := range broker.AppendCloudEventAttributes(attrs[:0], e, b.cfg.Source) {
		f := fieldOf[a.Name]
		args = append(args, f, a.Value)
		size += len(f) + len(a.Value)
	}
	for k, v := range e.Headers {
		args = append(args, HeaderPrefix+k, v)
		size += len(HeaderPrefix) + len(k) + len(v)
	}
	if size > b.cfg.MaxMessage {
		return nil, broker.Permanent(tooLarge(e.EventID, len(e.Payload), size-len(e.Payload), b.cfg.MaxMessage))
	}
	return args, nil
}

func tooLarge(id string, payload, fields, limit int) error {
	return fmt.Errorf("redisbroker: event %s: its %d-byte payload plus %d bytes of fields is %d bytes, above the limit of %d (Config.MaxMessage) (%w); store large data elsewhere and send a reference",
		id, payload, fields, payload+fields, limit, outbox.ErrPayloadTooLarge)
}

// dedupKey names the key that remembers id for stream, in the stream's
// hash slot: Redis Cluster hashes only a key's hash tag (the text between
// its first '{' and the next '}') when it has one, the whole key otherwise.
func (b *Broker) dedupKey(stream, id string) string {
	return b.cfg.DedupPrefix + "{" + hashTag(stream) + "}:" + id
}

func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func fillResults(res []broker.Result, err error) {
	for i := range res {
		if res[i].Err == nil {
			res[i].Err = err
		}
	}
}
