package store

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
)

// Queues and tasks written before keep reading, and rows written now read the same on an older
// worker: the stored shapes of a queue's configuration and a task's overrides are the ones
// courier has always written (the strings below were written by courier.Queue's and
// courier.TaskOverrides' own tags before the store kept its own shapes).
func TestStoredConfigShapes(t *testing.T) {
	q := courier.Queue{Name: "docparse", PushURL: "https://w.example/push", Secrets: []string{"whsec_a", "whsec_b"}, AllowPrivate: true,
		ConcurrencyLimit: 7, Weights: courier.BandWeights{5, 4, 3, 2, 1}, PendingTimeout: time.Hour, ProcessingTimeout: 2 * time.Minute,
		PushTimeout: 3 * time.Second, HeartbeatTimeout: 4 * time.Second,
		Retry:            courier.RetryPolicy{MaxAttempts: 5, InitialInterval: 6 * time.Second, BackoffCoef: 1.5, MaxInterval: 7 * time.Minute},
		SuccessRetention: 8 * time.Hour, PurgeAge: 9 * time.Hour,
		InsertRate: 2.5, InsertBurst: 10, MaxPending: 100, PerKeyLimit: 3, FairKeys: true, KeyWeights: map[string]int{"a": 2, "b": 3},
		DispatchRate: 0.5, DispatchBurst: 4}
	const full = `{"push_url":"https://w.example/push","secrets":["whsec_a","whsec_b"],"allow_private":true,"concurrency_limit":7,` +
		`"weights":[5,4,3,2,1],"pending_timeout":3600000000000,"processing_timeout":120000000000,"push_timeout":3000000000,` +
		`"heartbeat_timeout":4000000000,"retry":{"max_attempts":5,"initial_interval":6000000000,"backoff":1.5,"max_interval":420000000000},` +
		`"success_retention":28800000000000,"purge_age":32400000000000,"insert_rate_per_second":2.5,"insert_burst":10,"max_pending":100,` +
		`"per_key_limit":3,"fair_keys":true,"key_weights":{"a":2,"b":3},"dispatch_rate_per_second":0.5,"dispatch_burst":4}`
	const bare = `{"push_url":"","secrets":null,"allow_private":false,"concurrency_limit":0,"weights":[0,0,0,0,0],"pending_timeout":0,` +
		`"processing_timeout":0,"push_timeout":0,"heartbeat_timeout":0,"retry":{"max_attempts":0,"initial_interval":0,"backoff":0,"max_interval":0},` +
		`"success_retention":0,"purge_age":0}`

	b, err := encodeQueue(q)
	require.NoError(t, err)
	require.JSONEq(t, full, string(b))
	require.Equal(t, full, string(b), "the same bytes, fields in the same order")
	b, err = encodeQueue(courier.Queue{Name: "bare", InFlight: 3, CreatedAt: time.Now()})
	require.NoError(t, err)
	require.Equal(t, bare, string(b), "the name, the count and the times are columns of their own")

	got, err := decodeQueue([]byte(full))
	require.NoError(t, err)
	q.Name = "" // a column of its own
	require.Equal(t, q, got)

	o := courier.TaskOverrides{PendingTimeout: time.Hour, ProcessingTimeout: time.Minute, HeartbeatTimeout: time.Second, MaxAttempts: 4}
	const overrides = `{"pending_timeout":3600000000000,"processing_timeout":60000000000,"heartbeat_timeout":1000000000,"max_attempts":4}`
	b, err = encodeOverrides(o)
	require.NoError(t, err)
	require.Equal(t, overrides, string(b))
	b, err = encodeOverrides(courier.TaskOverrides{})
	require.NoError(t, err)
	require.Equal(t, `{}`, string(b))
	gotO, err := decodeOverrides([]byte(overrides))
	require.NoError(t, err)
	require.Equal(t, o, gotO)
}

// Every setting of a queue is kept: a field added to courier.Queue is a field of the stored
// shape too (or one of the row's own columns), or it would be lost on the next read.
func TestStoredConfigKeepsEverySetting(t *testing.T) {
	columns := map[string]bool{"Name": true, "InFlight": true, "CreatedAt": true, "UpdatedAt": true}
	stored := map[string]bool{}
	for f := range reflect.TypeFor[queueConfig]().Fields() {
		stored[f.Name] = true
	}
	for f := range reflect.TypeFor[courier.Queue]().Fields() {
		require.True(t, columns[f.Name] || stored[f.Name], "courier.Queue.%s has no place in queueConfig (store/task_config.go)", f.Name)
	}
}
