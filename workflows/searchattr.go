package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
)

// The search attributes runs change as they go (courier.Kind.Updates): the state, a timer's
// fire time, and the dead record that blocks an ordered key.
var (
	saState  = temporal.NewSearchAttributeKeyKeyword(courier.SAState)
	saFireAt = temporal.NewSearchAttributeKeyTime(courier.SAFireAt)
	saRecord = temporal.NewSearchAttributeKeyInt64(courier.SARecord)
	saTopic  = temporal.NewSearchAttributeKeyKeyword(courier.SATopic)
)

// StartAttributes are the search attributes a run of kind k starts with, as the starters pass
// them to Temporal: the kind's row says which (courier.Kind.StartAttributes), v their values.
func StartAttributes(k courier.Kind, v courier.RunAttributes) temporal.SearchAttributes {
	values := k.StartAttributes(v)
	set := make([]temporal.SearchAttributeUpdate, 0, len(values))
	for _, name := range k.Attributes { // in the row's order, not the map's
		switch val := values[name].(type) {
		case string:
			set = append(set, temporal.NewSearchAttributeKeyKeyword(name).ValueSet(val))
		case int64:
			set = append(set, temporal.NewSearchAttributeKeyInt64(name).ValueSet(val))
		case time.Time:
			set = append(set, temporal.NewSearchAttributeKeyTime(name).ValueSet(val))
		default: // courier.RunAttributes holds no other type (TestStartAttributes)
			panic("workflows: search attribute " + name + " has a value of no Temporal type")
		}
	}
	return temporal.NewSearchAttributes(set...)
}
