package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A process hosting the embedded engine collects less often, within a soft memory limit;
// GOGC and GOMEMLIMIT set by the user are left to the runtime.
func TestGCSettingsOfTheEmbeddedEngine(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

	percent, limit := gcSettings(env(nil))
	require.Equal(t, embeddedGCPercent, percent)
	require.EqualValues(t, embeddedMemoryLimit, limit)

	percent, limit = gcSettings(env(map[string]string{"GOGC": "50", "GOMEMLIMIT": "4GiB"}))
	require.Zero(t, percent, "GOGC set: left alone")
	require.Zero(t, limit, "GOMEMLIMIT set: left alone")
}
