// Package outbox is the producer side of courier's transactional outbox: Enqueue writes
// messages into the courier_outbox table inside the caller's own transaction, so a message
// exists if and only if the business change it describes committed. courier's relay publishes
// every committed row at least once. Many messages in one Enqueue call go out in few statements
// (multi-row INSERTs of up to 500 rows) through a *sql.Tx or a bun handle. Producers in other
// languages insert the same rows by hand (docs/outbox.md).
package outbox
