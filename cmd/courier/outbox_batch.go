package main

import (
	"errors"
	"flag"
	"strings"
	"time"

	"github.com/courier-oss/courier/relay"
)

// bindOutboxBatch registers the outbox batch mode's settings (docs/outbox.md, "Batch mode").
// Its zero value, the default, batches nothing.
func (c *Config) bindOutboxBatch(fs *flag.FlagSet) {
	b := &c.Outbox.Batch
	listFlag(fs, &b.Sources, "outbox-batch-sources", "COURIER_OUTBOX_BATCH_SOURCES",
		"outbox sources whose records are delivered in batches (one workflow per claimed batch), comma-separated; \"default\" is courier's own database (COURIER_OUTBOX_BATCH_SOURCES)")
	listFlag(fs, &b.Topics, "outbox-batch-topics", "COURIER_OUTBOX_BATCH_TOPICS",
		"topic patterns (orders.*, audit.>) whose records are delivered in batches, comma-separated (COURIER_OUTBOX_BATCH_TOPICS)")
	fs.IntVar(&b.Max, "outbox-batch-max", c.env.integer("COURIER_OUTBOX_BATCH_MAX", relay.DefaultBatchMax), "most records in one batch, and in one claim from a source that batches (COURIER_OUTBOX_BATCH_MAX)")
	fs.DurationVar(&b.Linger, "outbox-batch-linger", c.env.duration("COURIER_OUTBOX_BATCH_LINGER", relay.DefaultBatchLinger), "least time between two batches of one source; records committed meanwhile share the next one (COURIER_OUTBOX_BATCH_LINGER)")
}

// splitList splits a comma-separated setting, dropping empty items and spaces.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// listFlag binds a comma-separated list to the flag name, its default read from the
// environment variable envName.
func listFlag(fs *flag.FlagSet, dst *[]string, name, envName, usage string) {
	*dst = splitList(env(envName, ""))
	fs.Func(name, usage, func(s string) error { *dst = splitList(s); return nil })
}

// validateOutboxBatch checks the batch mode's settings.
func (c *Config) validateOutboxBatch() error {
	b := c.Outbox.Batch
	switch {
	case b.Max < 1 || b.Max > 10000:
		return errors.New("outbox batch max must be from 1 to 10000")
	case b.Linger < time.Millisecond || b.Linger > time.Minute:
		return errors.New("outbox batch linger must be from 1ms to 1m")
	}
	return b.Check()
}
