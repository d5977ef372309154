package outbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/outbox"
)

// A task row written by hand (another language) may carry the task's concurrency key, as the
// body of POST /v1/tasks does.
func TestTaskRowCarriesConcurrencyKey(t *testing.T) {
	r, err := outbox.ParseTaskRow([]byte(`{"task_id":"doc-42","task_version":3,"queue":"docparse","concurrency_key":"tenant-7"}`))
	require.NoError(t, err)
	require.Equal(t, "tenant-7", r.ConcurrencyKey)
	require.Equal(t, "docparse", r.Queue)
}
