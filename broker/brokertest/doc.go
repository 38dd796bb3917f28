// Package brokertest is the conformance suite every broker adapter passes.
//
// An adapter's test builds a Harness (how to make a Broker for a fresh
// topic, how to read back what reached that topic) and calls Run:
//
//	func TestConformance(t *testing.T) {
//		brokertest.Run(t, brokertest.Harness{
//			Name:       "mybroker",
//			New:        newBrokerAndReceiver,
//			MaxPayload: 1 << 20,
//		})
//	}
//
// The suite checks what the relay relies on (see broker.Broker): payloads,
// identity and user headers arrive unchanged; a batch gets exactly one
// result per event and arrives in order; an oversize event is refused with
// a permanent error without failing its neighbours, and so is an event that
// fits only without its headers, one that is not a valid CloudEvent (no
// type, a control character in its type or key, a negative schema version)
// or one that carries a header the Harness.Transport reserves, while
// ordinary headers such as X-Request-Id arrive; an ended context or a
// closed broker yields errors promptly, never a false confirmation and never
// a permanent error (which would bury events); Close is idempotent;
// concurrent Publish calls are safe; and, when the harness can restart the
// server, the same Broker recovers by itself.
//
// The suite runs its checks in parallel, each on its own topic, so a
// harness must support several Brokers at once. Restart runs alone, after
// the others.
package brokertest
