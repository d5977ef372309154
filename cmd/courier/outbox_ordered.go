package main

import (
	"errors"
	"flag"
)

// bindOutboxOrdered registers the outbox ordered mode's settings (docs/flow-control.md,
// "Ordered keys in the outbox"). Its zero value, the default, orders nothing.
func (c *Config) bindOutboxOrdered(fs *flag.FlagSet) {
	o := &c.Outbox.Ordered
	listFlag(fs, &o.Sources, "outbox-ordered-sources", "COURIER_OUTBOX_ORDERED_SOURCES",
		"outbox sources whose keyed records are published in commit order per key, comma-separated; \"default\" is courier's own database (COURIER_OUTBOX_ORDERED_SOURCES)")
	listFlag(fs, &o.Topics, "outbox-ordered-topics", "COURIER_OUTBOX_ORDERED_TOPICS",
		"topic patterns (orders.>, audit.*) whose keyed records are published in commit order per key, comma-separated (COURIER_OUTBOX_ORDERED_TOPICS)")
	fs.IntVar(&o.Max, "outbox-ordered-max", c.env.integer("COURIER_OUTBOX_ORDERED_MAX", 0), "most records of one key claimed and published one after another in one activity; default 100, or the batch max when the batch mode is on (COURIER_OUTBOX_ORDERED_MAX)")
}

// validateOutboxOrdered checks the ordered mode's settings.
func (c *Config) validateOutboxOrdered() error {
	o := c.Outbox.Ordered
	if o.Max < 0 || o.Max > 10000 {
		return errors.New("outbox ordered max must be from 1 to 10000 (0: the default)")
	}
	return o.Check()
}
