package redisbroker

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
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

// maxFields bounds the fields of one entry: the dedup script passes them to
// XADD through Lua's unpack, whose stack holds about 8,000 values.
const maxFields = 3000

// maxGroup bounds the events one run of the dedup script adds: Redis runs
// a script without interleaving other clients' commands, so a run must
// stay short (about a millisecond per few hundred entries).
const maxGroup = 256

// addScript adds a group of entries to one stream, skipping each event
// whose id was added within the dedup window, atomically: Redis runs a
// script without interleaving other commands, so no second relay can add
// the same event between the lookup and the XADD. The ids remembered are
// fields of hashes, one per slice of the window (dedupBuckets), each
// mapping an event id to its entry id. KEYS[1] is the stream, KEYS[2] the
// current slice's hash, KEYS[3…] the earlier slices' (all in the stream's
// hash slot). ARGV[1] is when the current slice's hash expires (Unix
// seconds), ARGV[2] MAXLEN ('0' = no trimming), ARGV[3] the number of
// events n, then the n event ids, then per event the number of field
// arguments, the event key, and the fields and values. It returns per
// event {0, entry id} (added), {1, first entry id} (a duplicate),
// {2, error} (XADD refused it) or {3, ”} (not tried: an earlier event of
// its key in the group was refused).
const addScript = `local expireat, maxlen, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ids = {unpack(ARGV, 4, 3 + n)}
local prev = {}
for k = 2, #KEYS do
  local vals = redis.call('HMGET', KEYS[k], unpack(ids))
  for i = 1, n do
    if not prev[i] and vals[i] then prev[i] = vals[i] end
  end
end
local out, failed, seen, added, pos = {}, {}, {}, {}, 4 + n
for i = 1, n do
  local c, key = tonumber(ARGV[pos]), ARGV[pos + 1]
  local first, last = pos + 2, pos + 1 + c
  pos = last + 1
  local p = prev[i] or seen[ids[i]]
  if key ~= '' and failed[key] then
    out[i] = {3, ''}
  elseif p then
    out[i] = {1, p}
  else
    local r
    if maxlen ~= '0' then
      r = redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', maxlen, '*', unpack(ARGV, first, last))
    else
      r = redis.pcall('XADD', KEYS[1], '*', unpack(ARGV, first, last))
    end
    if type(r) == 'table' and r.err then
      out[i] = {2, r.err}
      if key ~= '' then failed[key] = true end
    else
      seen[ids[i]] = r
      added[#added + 1] = ids[i]
      added[#added + 1] = r
      out[i] = {0, r}
    end
  end
end
if #added > 0 then
  redis.pcall('HSET', KEYS[2], unpack(added))
  redis.pcall('EXPIREAT', KEYS[2], expireat)
end
return out`

// dedupBuckets is how many slices the dedup window is cut into. An event
// id is remembered for at least DedupWindow and at most 1+1/dedupBuckets
// of it; a lookup reads dedupBuckets+1 hashes per group, not a key per
// event.
const dedupBuckets = 4

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
	b.send(ctx, events, msgs, res, false)
	return res
}

// send runs one pipeline for the events whose fields are set: a plain
// XADD per event with NoDedup, else one run of the dedup script per group
// of up to maxGroup consecutive events of one stream. When the server has
// lost the script (a restart, SCRIPT FLUSH), those groups did not run: it
// loads the script and sends them again, once.
func (b *Broker) send(ctx context.Context, events []outbox.Event, fields [][]any, res []broker.Result, again bool) {
	pipe := b.rdb.Pipeline()
	if b.cfg.NoDedup {
		cmds := make([]*redis.Cmd, len(events))
		for i, f := range fields {
			if f != nil {
				cmds[i] = pipe.Do(ctx, f...) // the whole XADD, built by message
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
		return
	}
	groups := b.groups(events, fields)
	if len(groups) == 0 {
		return
	}
	cmds := make([]*redis.Cmd, len(groups))
	now := time.Now().Unix()
	for g, idx := range groups {
		stream := events[idx[0]].Topic
		keys, expireAt := b.dedupKeys(stream, now)
		n := 3 + len(idx)
		for _, i := range idx {
			n += 2 + len(fields[i])
		}
		args := make([]any, 0, n)
		args = append(args, expireAt, b.maxLen, len(idx))
		for _, i := range idx {
			args = append(args, events[i].EventID)
		}
		for _, i := range idx {
			args = append(args, len(fields[i]), events[i].Key)
			args = append(args, fields[i]...)
		}
		cmds[g] = pipe.EvalSha(ctx, addScriptSHA, keys, args...)
	}
	_, _ = pipe.Exec(ctx)
	var lost [][]any
	for g, c := range cmds {
		idx := groups[g]
		if err := c.Err(); err != nil {
			if !again && redis.HasErrorPrefix(err, "NOSCRIPT") {
				if lost == nil {
					lost = make([][]any, len(events))
				}
				for _, i := range idx {
					lost[i] = fields[i]
				}
				continue
			}
			for _, i := range idx {
				res[i].Err = b.classify(ctx, &events[i], err)
			}
			continue
		}
		b.groupReply(events, idx, c.Val(), res)
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

// groups splits the sendable events into runs of the script: consecutive
// events of one stream, at most maxGroup each. Events of one stream keep
// their order across its groups, which run in pipeline order.
func (b *Broker) groups(events []outbox.Event, fields [][]any) [][]int {
	var out [][]int
	open := map[string]int{} // stream → index in out of its group being filled
	for i, f := range fields {
		if f == nil {
			continue
		}
		g, ok := open[events[i].Topic]
		if !ok || len(out[g]) == maxGroup {
			g = len(out)
			out = append(out, make([]int, 0, min(maxGroup, len(events)-i)))
			open[events[i].Topic] = g
		}
		out[g] = append(out[g], i)
	}
	return out
}

// groupReply reads one run of the script's per-event answers.
func (b *Broker) groupReply(events []outbox.Event, idx []int, val any, res []broker.Result) {
	arr, _ := val.([]any)
	for j, i := range idx {
		e := &events[i]
		var pair []any
		if j < len(arr) {
			pair, _ = arr[j].([]any)
		}
		var code int64
		var text string
		ok := len(pair) == 2
		if ok {
			code, ok = pair[0].(int64)
			text, _ = pair[1].(string)
		}
		switch {
		case !ok:
			res[i].Err = fmt.Errorf("redisbroker: event %s on %q: unexpected reply %v from the dedup script; was it stored? retry later", e.EventID, e.Topic, val)
		case code == 0 || code == 1:
			res[i] = result(e, text, code == 1)
		case code == 2:
			res[i].Err = b.classify(context.Background(), e, redisError(text))
		default:
			res[i].Err = fmt.Errorf("redisbroker: event %s on %q not added: an earlier event of its key in the batch was refused, and a key's events go in order; retry later", e.EventID, e.Topic)
		}
	}
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

// message returns e's fields and values, in order; with NoDedup, the whole
// XADD command that adds them.
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
	if b.cfg.NoDedup {
		args = append(args, "xadd", e.Topic)
		if b.cfg.MaxLen > 0 {
			args = append(args, "maxlen", "~", b.maxLenArg)
		}
		args = append(args, "*")
	}
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

// dedupKeys returns the script's keys for stream at Unix time now: the
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
