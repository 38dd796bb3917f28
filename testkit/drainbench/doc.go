// Package drainbench is the relay-drain benchmark every broker adapter
// runs, so that each adapter's figure is measured the same way: the same
// backlog (events, keys, payload), the same relay settings (batch size,
// workers), the same raw baseline (the broker's own client publishing the
// same messages in batches of the same size, each batch awaited), the same
// ceiling (the same backlog drained into broker/membroker) and the same CPU
// accounting (this process, the broker's server process, PostgreSQL).
//
// An adapter's benchmark builds a Harness and calls Run:
//
//	func BenchmarkRelayDrain(b *testing.B) {
//		drainbench.Run(b, drainbench.Harness{Topic: queue, Broker: br, Raw: raw, Server: "beam.smp"})
//	}
//
// OUTBOX_BENCH_EVENTS changes the backlog (default 100,000) and
// OUTBOX_BENCH_WORKERS the relay's workers (default 3, the relay's own
// default).
package drainbench
