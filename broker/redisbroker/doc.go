// Package redisbroker publishes outbox events to Redis Streams with
// go-redis v9.
//
// Each Publish call sends the whole batch as one pipeline on one
// connection (a round trip for the batch) and reads every reply; an event's
// result is nil only once Redis answered with the entry id it was added
// under (or, for a duplicate, first added under).
//
// # Entry mapping
//
// The stream is the event's Topic (the key XADD adds to, created on first
// use). The entry's fields, in this order:
//
//	data              Payload, byte for byte
//	ce_id             EventID
//	ce_source         Config.Source (default "outbox")
//	ce_specversion    1.0
//	ce_type           Type
//	ce_time           CreatedAt, RFC 3339 in UTC (left out when zero)
//	content_type      ContentType (default application/json)
//	key               Key (left out when empty)
//	ce_schemaversion  SchemaVersion (left out when 0)
//	ce_aggregatetype  AggregateType (left out when empty)
//	h:<name>          each user header, name and value as given
//
// Values are raw bytes, not encoded: Redis strings are binary-safe. A user
// header's field is "h:" and its name, and a header name cannot hold a
// colon (it must be an HTTP token), so no header can collide with the
// adapter's fields, whatever its name: a ce_type or x-death header
// arrives as h:ce_type or h:x-death. The one name refused
// (broker.ReservedHeaders(broker.Redis)) is Content-Type, which every
// transport reserves: the content type is the content_type field. Package
// inbox/redismsg reads an entry back into an inbox.Message.
//
// # Recognising a re-published event
//
// A relay that crashes after XADD and before its acknowledgement reached
// the database publishes the event again. With dedup on (the default), a
// batch's events of one stream are added by one run of a small Lua script
// per group of up to 256: it looks the group's event ids up, then XADDs
// each one not found and records it, event id → entry id. A found id is
// not added again: its result is confirmed with Duplicate set and the
// entry id of the first copy. Redis runs a script without interleaving
// other commands, so two relays racing with the same event add it once.
//
// The ids are kept in hashes, one per quarter of Config.DedupWindow
// (default 24h), named <DedupPrefix>{<stream's hash tag>}:<quarter in
// seconds>:<quarter number>, each expiring one window after its quarter
// ends; a lookup reads the current and the four earlier ones. An id is so
// remembered for at least the window and at most a quarter more. The keys
// sit in the stream's Redis Cluster hash slot. The cost: about 80 bytes of
// memory per event in the window (some 80 MB per million events), the
// expiry of a whole quarter's hash at once (set lazyfree-lazy-expire yes
// for large ones, or a shorter window), and the script's time on the
// server: BENCHMARKS.md, "Broker adapters against their raw clients", has
// the rate against plain XADD (in short, Lua costs about half the server's
// throughput). Consumers still deduplicate what falls outside the window
// with package inbox (ce_id).
// Config.NoDedup (dedup=off in the URL) sends plain XADDs instead.
//
// Explicit entry ids derived from the event were the alternative, and are
// not used: a stream only takes ids above its last one, so an old event
// re-published after newer ones would be refused, not recognised. A key
// with a TTL per event (SET NX) was the first version: a key per event
// costs about twice the memory and a command more per event. Redis 8.6's
// XADD IDMP does in the server what the script does; this package does
// not need it.
//
// # Ordering
//
// Features declares OrderNone. The commands of one pipeline run in order
// on one connection, so a batch's entries are added in slice order; within
// one run of the dedup script, an event refused by XADD holds the later
// events of its key in that run (not tried; transient). But nothing holds
// a key across runs, streams or plain XADDs: a command that fails (OOM at
// maxmemory with noeviction, WRONGTYPE on one topic while the key's next
// event goes to another) does not stop the commands after it, so a key's
// later event can be stored although its earlier one was not. The relay
// therefore never puts two events of a key in one Publish call. When the
// connection breaks mid-pipeline the commands after the break did not
// run, and which before it did is unknown: every unanswered event fails
// (transient), and dedup makes the retry of those that were added a
// duplicate.
//
// # Errors
//
// Permanent (the relay buries the event, with the reason): a topic whose
// key holds something other than a stream (ErrNotStream); an empty topic
// (ErrInvalidTopic); an entry above Config.MaxMessage (wrapping
// outbox.ErrPayloadTooLarge); an event that is not a valid CloudEvent or
// carries a header Redis reserves or cannot send unchanged. Check
// (broker.Checker) refuses the topic, header and size problems at enqueue.
// Wrapping broker.ErrUnavailable (retried without counting an attempt):
// no connection, a broken one, a server that is loading, read-only or
// busy, a closed Broker (ErrClosed). Everything else is transient: no
// reply by Config.Timeout, OOM, any other refusal.
//
// # Connection
//
// Dial builds and owns a go-redis client from a redis:// or rediss:// URL
// (TLS verifying the server's certificate) with the adapter's options in
// the query, and checks it with a PING. The client does not retry commands
// itself and honours context deadlines. New wraps a client the caller
// already has (redis.Client, redis.ClusterClient, …).
package redisbroker
