// Package testkit holds this repository's own test fixtures for the local
// servers: teststores (a fresh table on each store), drainbench (a drain
// through the relay, for the adapters' tests and benchmarks) and e2echeck
// (an end-to-end workload checker). They wire concrete stores, brokers and
// the relay together, so they cannot live in internal/, whose packages are
// leaf helpers. They are not an API for users and change with any commit.
package testkit
