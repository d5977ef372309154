package courier_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
)

// Every band needs a weight from 1 to MaxBandWeight, and a request lists exactly one per band.
func TestBandWeights(t *testing.T) {
	require.NoError(t, courier.DefaultBandWeights.Validate())
	for _, bad := range []courier.BandWeights{{}, {1, 0, 1, 1, 1}, {1, -1, 1, 1, 1}, {1, 1, 1, 1, courier.MaxBandWeight + 1}} {
		var e *courier.Error
		require.ErrorAs(t, bad.Validate(), &e, "%v", bad)
		require.Equal(t, "weights", e.Details["field"])
	}
	w, err := courier.BandWeightsOf([]int{5, 4, 3, 2, 1})
	require.NoError(t, err)
	require.Equal(t, courier.BandWeights{5, 4, 3, 2, 1}, w)
	for _, bad := range [][]int{nil, {1, 2, 3, 4}, {1, 2, 3, 4, 5, 6}, {0, 1, 1, 1, 1}} {
		_, err := courier.BandWeightsOf(bad)
		require.Equal(t, courier.CodeValidation, courier.ErrorCode(err), "%v", bad)
	}
}
