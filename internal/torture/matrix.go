package torture

import "strings"

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
}

// Matrix is the short matrix CI runs (go test ./internal/torture). A broker
// adapter or a source that lands adds its cells here, one line each (and,
// for a broker, its transport in transports).
var Matrix = []Cell{
	{Store: "postgres", Broker: "nats"},
	{Store: "mysql", Broker: "nats"},
	{Store: "sqlite", Broker: "nats"},
	{Store: "postgres", Broker: "nats", Embedded: true, Faults: []Kind{Kill, BrokerRestart, PGTerminate, BrokerReset, Stop}},
	// {Store: "postgres", Broker: "kafka"},
	// {Store: "postgres", Broker: "nats", Source: "pgcdc"},
	// {Store: "mysql", Broker: "nats", Source: "binlog"},
}

// Name is the cell's test name: store_broker[-embedded]_source.
func (c Cell) Name() string {
	b := c.Broker
	if c.Embedded {
		b += "-embedded"
	}
	s := c.Source
	if s == "" {
		s = "poll"
	}
	return strings.Join([]string{c.Store, b, s}, "_")
}
