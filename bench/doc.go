// Package bench measures courier against the embedded stack (and PostgreSQL when given) next
// to a bare-Temporal baseline on the same server, and prints the figures as one table. It backs
// `courier bench`; timings are never asserted in tests.
package bench
