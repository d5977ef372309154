package devstack

import (
	"testing"
)

// The SQLite plugin turns every connect attribute that is not a URI parameter into a pragma
// run on each connection, so what prepareDatabase hands the server is what the engine runs.
func TestDurableSetsSynchronousFull(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		durable bool
		want    string
	}{
		{durable: false, want: "NORMAL"},
		{durable: true, want: "FULL"},
	} {
		cfg, err := withDefaults(Config{DataDir: t.TempDir(), Durable: tc.durable})
		if err != nil {
			t.Fatal(err)
		}
		sqlCfg, err := prepareDatabase(cfg)
		if err != nil {
			t.Fatal(err)
		}
		attrs := sqlCfg.ConnectAttributes
		if got := attrs["synchronous"]; got != tc.want {
			t.Errorf("Durable=%v: synchronous = %q, want %q", tc.durable, got, tc.want)
		}
		if got := attrs["journal_mode"]; got != "wal" {
			t.Errorf("Durable=%v: journal_mode = %q, want wal", tc.durable, got)
		}
	}
}
