// Command peers measures a peer's transactional outbox next to ours.
package main
