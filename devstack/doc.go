// Package devstack runs the Temporal infrastructure that `courier dev` needs
// inside the current process: a Temporal server persisted to a SQLite file and,
// optionally, its Web UI. It prepares the namespace, retention and search
// attributes courier relies on, so a fresh machine needs nothing but Go.
//
// This is the only non-test package allowed to import go.temporal.io/server;
// the embedded NATS server lives in the lighter devstack/embeddednats package.
package devstack
