//go:build !slim

package main

import (
	"runtime/debug"
)

// The garbage collector's settings in a process that hosts the embedded Temporal engine
// (courier dev, courier bench). The engine allocates heavily per workflow step, and with Go's
// default (GOGC=100) the collector took about 8 % of the bench's CPU; collecting at 300 %
// heap growth raised bare Temporal's completions by about 6 % (docs/deployment.md). The soft
// limit brings the collector back to its usual pace before the heap passes 1 GiB.
const (
	embeddedGCPercent   = 300
	embeddedMemoryLimit = 1 << 30
)

// gcSettings says what tuneGC changes: the GC percent unless GOGC is set, and the soft memory
// limit unless GOMEMLIMIT is set (0: leave it).
func gcSettings(getenv func(string) string) (percent int, limit int64) {
	if getenv("GOGC") == "" {
		percent = embeddedGCPercent
	}
	if getenv("GOMEMLIMIT") == "" {
		limit = embeddedMemoryLimit
	}
	return percent, limit
}

// tuneGC applies gcSettings for a process that runs the embedded engine; GOGC and GOMEMLIMIT,
// when set, win.
func tuneGC(getenv func(string) string) {
	percent, limit := gcSettings(getenv)
	if percent > 0 {
		debug.SetGCPercent(percent)
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
}
