// Package faultproxy is a TCP proxy on a loopback port that injects the
// network faults the torture run and the adapters' reconnect tests need:
// cutting every connection, blackholing traffic, adding latency. It is a
// leaf helper: it imports nothing of the project.
package faultproxy
