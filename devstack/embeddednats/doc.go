// Package embeddednats runs a NATS server with JetStream inside the current
// process. `courier dev` uses it so a developer needs nothing but Go, and tests
// of other packages use it to get a real, file-backed JetStream cheaply. It
// deliberately has no dependency on the Temporal server.
package embeddednats
