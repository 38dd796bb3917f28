package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

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

// fieldOf maps a CloudEvents attribute to its field, boxed once so that
// building an entry does not allocate for the names.
var fieldOf = map[string]any{
	broker.AttrID: FieldID, broker.AttrSource: FieldSource, broker.AttrSpecVersion: FieldSpecVersion,
	broker.AttrType: FieldType, broker.AttrTime: FieldTime, broker.AttrDataContentType: FieldContentType,
	broker.AttrPartitionKey: FieldKey, broker.AttrSchemaVersion: FieldSchemaVersion,
	broker.AttrAggregateType: FieldAggregateType,
}

// maxFields bounds the fields of one entry the relay sends.
const maxFields = 3000

// dedupBuckets is how many slices the dedup window is cut into. An event
// id is remembered for at least DedupWindow and at most 1+1/dedupBuckets
// of it; a lookup reads dedupBuckets+1 hashes per stream and call, not a
// key per event.
const dedupBuckets = 4

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
	if !b.gate.Enter() {
		fillResults(res, ErrClosed)
		return res
	}
	defer b.gate.Leave()
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
	b.send(ctx, events, msgs, res)
	return res
}

// send adds the events whose XADD command is set: with NoDedup in one
// pipeline, else through sendDedup.
func (b *Broker) send(ctx context.Context, events []outbox.Event, xadds [][]any, res []broker.Result) {
	if !b.cfg.NoDedup {
		b.sendDedup(ctx, events, xadds, res)
		return
	}
	pipe := b.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(events))
	for i, f := range xadds {
		if f != nil {
			cmds[i] = pipe.Do(ctx, f...)
		}
	}
	if pipe.Len() == 0 {
		return
	}
	_, _ = pipe.Exec(ctx) // each command carries its own reply or error
	for i, c := range cmds {
		if c == nil {
			continue
		}
		if err := c.Err(); err != nil {
			res[i].Err = b.classify(ctx, &events[i], err)
			continue
		}
		id, _ := c.Text()
		res[i] = result(&events[i], id, false)
	}
}

// streamCall is the part of one Publish call that goes to one stream.
type streamCall struct {
	idx      []int    // the events, in call order
	keys     []string // the stream, then its dedup hashes (dedupKeys)
	expireAt int64    // of keys[1], the current hash
	typ      *redis.StatusCmd
	looks    []*redis.SliceCmd // HMGET of the events' ids in keys[1:]
}

// sendDedup adds the events in three round trips, with no script:
//
//  1. one pipeline reads, per stream, its TYPE and the events' ids in the
//     hashes of the dedup window (HMGET);
//  2. one MULTI/EXEC (per cluster slot: a stream and its hashes share one)
//     XADDs each event not found and records its id in the current hash
//     with an empty value, so that the entry and the record of its id are
//     stored together or not at all: a relay that crashes after this
//     point and publishes the event again finds its id;
//  3. one pipeline writes each added event's entry id over the empty
//     value, and forgets the id of an event whose XADD Redis refused.
//
// A found id is confirmed as Duplicate with the entry id it was stored
// under ("" when step 3 of that publish did not happen). Steps 1 and 2
// are not atomic together: two relays that publish the same event at the
// same moment (a lease taken over while its holder still publishes) may
// both add it; consumers drop such copies by ce_id (package inbox).
func (b *Broker) sendDedup(ctx context.Context, events []outbox.Event, xadds [][]any, res []broker.Result) {
	var calls []*streamCall
	byStream := map[string]*streamCall{}
	for i, f := range xadds {
		if f == nil {
			continue
		}
		sc := byStream[events[i].Topic]
		if sc == nil {
			sc = &streamCall{}
			byStream[events[i].Topic] = sc
			calls = append(calls, sc)
		}
		sc.idx = append(sc.idx, i)
	}
	if len(calls) == 0 {
		return
	}
	now := time.Now().Unix()
	look := b.rdb.Pipeline()
	for _, sc := range calls {
		stream := events[sc.idx[0]].Topic
		sc.keys, sc.expireAt = b.dedupKeys(stream, now)
		sc.typ = look.Type(ctx, stream)
		ids := make([]string, len(sc.idx))
		for j, i := range sc.idx {
			ids[j] = events[i].EventID
		}
		for _, k := range sc.keys[1:] {
			sc.looks = append(sc.looks, look.HMGet(ctx, k, ids...))
		}
	}
	_, _ = look.Exec(ctx) // each command carries its own reply or error

	tx := b.rdb.TxPipeline()
	adds := make([]*redis.Cmd, len(events))
	marks := make([]*redis.BoolCmd, len(events))
	first := make([]int, len(events)) // an event id's earlier copy in this call, +1
	var added []*streamCall
	for _, sc := range calls {
		if err := b.lookedUp(ctx, events, sc, res); err {
			continue
		}
		seen := map[string]int{}
		n := 0
		for j, i := range sc.idx {
			e := &events[i]
			if id, ok := foundID(sc.looks, j); ok {
				res[i] = result(e, id, true)
				continue
			}
			if f, ok := seen[e.EventID]; ok {
				first[i] = f + 1
				continue
			}
			seen[e.EventID] = i
			adds[i] = tx.Do(ctx, xadds[i]...)
			marks[i] = tx.HSetNX(ctx, sc.keys[1], e.EventID, "")
			n++
		}
		if n > 0 {
			tx.ExpireAt(ctx, sc.keys[1], time.Unix(sc.expireAt, 0))
			added = append(added, sc)
		}
	}
	if tx.Len() == 0 {
		return
	}
	_, _ = tx.Exec(ctx) // on EXECABORT or a broken connection every command carries the error

	fix := b.rdb.Pipeline()
	forgets := make([]*redis.IntCmd, len(events))
	winners := make([]*redis.StringCmd, len(events))
	for _, sc := range added {
		record := make([]any, 0, 2*len(sc.idx))
		for _, i := range sc.idx {
			c := adds[i]
			if c == nil {
				continue
			}
			e := &events[i]
			ours := marks[i].Err() == nil && marks[i].Val()
			if err := c.Err(); err != nil {
				res[i].Err = b.classify(ctx, e, err)
				if ours {
					// Redis ran the transaction and refused this XADD:
					// its id was recorded all the same
					forgets[i] = fix.HDel(ctx, sc.keys[1], e.EventID)
				}
				continue
			}
			id, _ := c.Text()
			if marks[i].Err() == nil && !ours {
				// Another publish of the same event recorded its id
				// between this call's lookup and its transaction: that
				// one's entry stands, this copy goes.
				fix.XDel(ctx, e.Topic, id)
				winners[i] = fix.HGet(ctx, sc.keys[1], e.EventID)
				continue
			}
			res[i] = result(e, id, false)
			record = append(record, e.EventID, id)
		}
		if len(record) > 0 {
			fix.HSet(ctx, sc.keys[1], record...)
		}
	}
	if fix.Len() > 0 {
		b.fixUp(ctx, fix, events, winners, forgets, res)
	}
	for i, f := range first {
		if f > 0 {
			if r := res[f-1]; r.Err != nil {
				res[i].Err = r.Err
			} else {
				res[i] = result(&events[i], r.ID, true)
			}
		}
	}
}

// fixUp runs step 3 of sendDedup and reads its replies.
func (b *Broker) fixUp(ctx context.Context, fix redis.Pipeliner, events []outbox.Event, winners []*redis.StringCmd, forgets []*redis.IntCmd, res []broker.Result) {
	// The entry ids only complete later duplicates' results; a failure to
	// forget an id matters, and is said in the event's error.
	_, _ = fix.Exec(ctx)
	for i, w := range winners {
		if w != nil {
			// the first copy's entry id, "" while its publish has not
			// written it yet
			res[i] = result(&events[i], w.Val(), true)
		}
	}
	for i, c := range forgets {
		if c != nil && c.Err() != nil {
			res[i].Err = fmt.Errorf("%w; and its event id stayed recorded in %s (%v): delete that field before requeueing the event, or a publish within the dedup window is taken for a duplicate", res[i].Err, c.Args()[1], c.Err())
		}
	}
}

// lookedUp reads step 1's replies for sc: it reports true, with every
// event of sc failed, when the stream is not a stream or a lookup failed.
func (b *Broker) lookedUp(ctx context.Context, events []outbox.Event, sc *streamCall, res []broker.Result) bool {
	err := sc.typ.Err()
	if err == nil {
		if t := sc.typ.Val(); t != "stream" && t != "none" {
			err = redisError("WRONGTYPE the key holds a " + t)
		}
	}
	for _, l := range sc.looks {
		if err == nil {
			err = l.Err()
		}
	}
	if err == nil {
		return false
	}
	for _, i := range sc.idx {
		res[i].Err = b.classify(ctx, &events[i], err)
	}
	return true
}

// foundID is the j-th id's value in the first hash that holds it.
func foundID(looks []*redis.SliceCmd, j int) (string, bool) {
	for _, l := range looks {
		if v := l.Val(); j < len(v) && v[j] != nil {
			s, _ := v[j].(string)
			return s, true
		}
	}
	return "", false
}

// redisError is an error reply the script passed on as text.
type redisError string

func (e redisError) Error() string { return string(e) }

// RedisError marks it as a reply of the server (redis.Error).
func (redisError) RedisError() {}

// result is the confirmed result of e stored under entry id.
func result(e *outbox.Event, id string, dup bool) broker.Result {
	r := broker.Result{Stream: e.Topic, Offset: -1, ID: id, Duplicate: dup}
	if _, seq, ok := strings.Cut(id, "-"); ok {
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

// message returns the XADD command that adds e: the stream, MAXLEN when
// set, and e's fields and values, in order.
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
	args := make([]any, 0, 6+2+2*(len(attrs)+len(e.Headers)))
	args = append(args, "xadd", e.Topic)
	if b.cfg.MaxLen > 0 {
		args = append(args, "maxlen", "~", b.maxLenArg)
	}
	args = append(args, "*")
	args = append(args, FieldData, e.Payload)
	size := len(FieldData) + len(e.Payload)
	for _, a := range broker.AppendCloudEventAttributes(attrs[:0], e, b.cfg.Source) {
		f := fieldOf[a.Name]
		switch a.Name {
		case broker.AttrSource:
			args = append(args, f, b.sourceArg)
		case broker.AttrSpecVersion:
			args = append(args, f, broker.SpecVersion)
		default:
			args = append(args, f, a.Value)
		}
		size += len(f.(string)) + len(a.Value)
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

// dedupKeys returns the keys a publish to stream reads and writes at Unix time now: the
// stream, then the hashes of the current and the dedupBuckets earlier
// slices of the window, named <prefix>{<stream's hash tag>}:<slice
// length>:<slice number> so they share the stream's Redis Cluster hash
// slot; and when the current one expires: a window after its slice ends.
func (b *Broker) dedupKeys(stream string, now int64) ([]string, int64) {
	slice := b.slice
	cur := now / slice
	prefix := b.cfg.DedupPrefix + "{" + hashTag(stream) + "}:" + strconv.FormatInt(slice, 10) + ":"
	keys := make([]string, 0, 2+dedupBuckets)
	keys = append(keys, stream)
	for k := int64(0); k <= dedupBuckets; k++ {
		keys = append(keys, prefix+strconv.FormatInt(cur-k, 10))
	}
	return keys, (cur+1)*slice + slice*dedupBuckets
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
