// Package relay claims committed outbox rows and starts one delivery workflow per row. Every
// worker runs a relay; claims are by status under row locks (never a cursor), so any number of
// relays share the work without a leader. PostgreSQL sources wake the relay with LISTEN/NOTIFY;
// a short poll is the fallback everywhere.
package relay
