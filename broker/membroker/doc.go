// Package membroker is an in-memory broker.Broker for tests of the relay
// and of applications: it records every confirmed event per topic and can
// be told to fail, so a test can simulate outages and poison events without
// a server.
//
// Failure injection, from coarse to fine:
//
//   - SetDown(true) fails every event with ErrDown (transient) until
//     SetDown(false), like a broker that is unreachable.
//   - FailNext(n, err) fails the next n events, across calls.
//   - SetHook(fn) lets a test decide per event: a non-nil error from fn is
//     that event's result (wrap it with broker.Permanent for a poison event).
//   - SetLatency(d) delays every Publish call, honouring its context.
//   - A payload plus user headers over Config.MaxPayload gets a permanent
//     error, as a real broker's size limit would; so does an event that is
//     not a valid CloudEvent (no type, a control character in its key) or
//     carries a header a transport reserves, as every real adapter refuses
//     them (broker.CheckEvent).
//
// Events reads what was delivered (deep copies); Wait blocks until enough
// has arrived. The broker passes the broker/brokertest suite.
package membroker
