package defaults_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/internal/defaults"
)

func TestUnlessPositive(t *testing.T) {
	for _, v := range []time.Duration{0, -time.Second} {
		defaults.UnlessPositive(&v, time.Minute)
		require.Equal(t, time.Minute, v, "zero and negative take the default")
	}
	n := 3
	defaults.UnlessPositive(&n, 10)
	require.Equal(t, 3, n, "a set value is kept")
}

func TestIfZero(t *testing.T) {
	s, n, f := "", -1, 0.0
	defaults.IfZero(&s, "courier")
	defaults.IfZero(&n, 10)
	defaults.IfZero(&f, 2)
	require.Equal(t, "courier", s)
	require.Equal(t, -1, n, "a negative value is kept, for validation to refuse")
	require.Equal(t, 2.0, f)
}
