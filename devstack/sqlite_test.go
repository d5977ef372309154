package devstack

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/server/common/config"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
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
		sqlCfg, visCfg, err := prepareDatabase(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if visCfg.ConnectAttributes["synchronous"] != tc.want {
			t.Errorf("Durable=%v: the visibility store's synchronous = %q, want %q", tc.durable, visCfg.ConnectAttributes["synchronous"], tc.want)
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

// A new data directory keeps the visibility store in a file of its own (one SQLite writer per
// file: its writes no longer queue behind the history's); one created before the split keeps
// both in temporal.db, so the runs it lists stay listed.
func TestVisibilityStoreFile(t *testing.T) {
	t.Parallel()
	fresh := t.TempDir()
	cfg, err := withDefaults(Config{DataDir: fresh})
	if err != nil {
		t.Fatal(err)
	}
	store, vis, err := prepareDatabase(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := filepath.Base(vis.DatabaseName), visibilityFileName; got != want || store.DatabaseName == vis.DatabaseName {
		t.Errorf("new data dir: visibility in %s, history in %s; want %s apart", vis.DatabaseName, store.DatabaseName, want)
	}
	// Opened again, it stays split.
	if _, vis, err = prepareDatabase(cfg); err != nil || filepath.Base(vis.DatabaseName) != visibilityFileName {
		t.Errorf("reopened: visibility in %s (%v)", vis.DatabaseName, err)
	}

	old := t.TempDir() // a data dir as courier created it before the split: temporal.db only
	if _, err := ensureSchema(&config.SQL{PluginName: sqliteplugin.PluginName, DatabaseName: filepath.Join(old, dbFileName),
		ConnectAttributes: sqliteAttributes(false)}); err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = old
	store, vis, err = prepareDatabase(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if store.DatabaseName != vis.DatabaseName {
		t.Errorf("existing data dir: visibility in %s, want it kept in %s", vis.DatabaseName, store.DatabaseName)
	}
	if _, err := os.Stat(filepath.Join(old, visibilityFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("existing data dir: a visibility file was created (%v)", err)
	}
}
