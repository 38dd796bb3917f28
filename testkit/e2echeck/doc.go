// Package e2echeck is what the broker adapters' end-to-end relay tests
// share: the workload they commit to PostgreSQL, the check of every event
// a consumer reads back with the broker's own client (each once at least,
// intact, each key's first deliveries in commit order), and the wait for
// the table to drain. Test support only.
package e2echeck
