package torture

import (
	"fmt"
	"strings"
)

// Cell is one cell of the CI matrix: a store, a broker and a source, with
// the faults injected there.
type Cell struct {
	Store  string // postgres, mysql, sqlite (internal/teststores kinds)
	Broker string // a transport name: nats
	Source string // "" for the poller; pgcdc or binlog once they exist
	// Embedded runs the broker inside the test so that it can be
	// restarted (broker-restart); otherwise the machine's shared server.
	Embedded bool
	// Faults overrides ShortKinds(Store).
	Faults []Kind
	// Keys overrides the workload's aggregates (Config.Keys): 1 and 3 make
	// hot keys, whose events are in flight in several batches at once.
	Keys int
}

// Matrix is the short matrix CI runs (go test ./cmd/outbox/internal/torture). A broker
// adapter or a source that lands adds its cells here, one line each (and,
// for a broker, its transport in transports).
var Matrix = []Cell{
	{Store: "postgres", Broker: "nats"},
	{Store: "mysql", Broker: "nats"},
	{Store: "sqlite", Broker: "nats"},
	{Store: "postgres", Broker: "nats", Embedded: true, Faults: []Kind{Kill, BrokerRestart, PGTerminate, BrokerReset, Stop}},
	// Relays leaving and joining mid-drain, hot keys (1 and 3).
	{Store: "sqlite", Broker: "nats", Keys: 1, Faults: []Kind{Leave, Kill, Stop, Leave, BrokerReset}},
	{Store: "postgres", Broker: "nats", Keys: 3, Faults: []Kind{Leave, Kill, Leave, Stop, PGTerminate, Leave}},
	{Store: "postgres", Broker: "nats", Keys: 1, Faults: []Kind{Stop, Leave, Kill, DBLatency, Leave, BrokerReset}},
	{Store: "mysql", Broker: "nats", Keys: 3, Faults: []Kind{Leave, Kill, Leave, Stop, DBReset, Leave}},
	// {Store: "postgres", Broker: "kafka"},
	// CDC: one relay streams the slot, two wait on its lease; the faults
	// aim at the one that streams.
	{Store: "postgres", Broker: "nats", Source: "pgcdc", Faults: []Kind{Kill, Stop, PGTerminate, BrokerReset, CommitTimeout, Stop, Kill}},
	// {Store: "mysql", Broker: "nats", Source: "binlog"},
}

// Name is the cell's test name: store_broker[-embedded]_source, then
// _keysN when the cell sets it.
func (c Cell) Name() string {
	b := c.Broker
	if c.Embedded {
		b += "-embedded"
	}
	s := c.Source
	if s == "" {
		s = "poll"
	}
	name := strings.Join([]string{c.Store, b, s}, "_")
	if c.Keys > 0 {
		name += fmt.Sprintf("_keys%d", c.Keys)
	}
	return name
}
