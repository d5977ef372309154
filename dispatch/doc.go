// Package dispatch decides which priority band the next free task slot goes to: weighted
// shares over the bands that have a backlog, so high priorities get most of the capacity and low
// priorities never starve. It is pure logic (no I/O), used by the task claimers (tasks/).
package dispatch
