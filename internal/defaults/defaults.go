// Package defaults fills the unset fields of a configuration, one line a field, so that a
// WithDefaults reads as the table of its defaults.
package defaults

import "cmp"

// UnlessPositive sets *v to def unless *v is above zero: a number left zero or negative takes
// its default.
func UnlessPositive[T cmp.Ordered](v *T, def T) {
	var zero T
	if *v <= zero {
		*v = def
	}
}

// IfZero sets *v to def when *v is its type's zero value (0, "", nil); any other value, a
// negative one too, is kept for the configuration's validation to judge.
func IfZero[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
