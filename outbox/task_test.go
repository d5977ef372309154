package outbox_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/internal/testenv"
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

// The rows InsertTask and ArmTimer write are the bodies of POST /v1/tasks and POST /v1/timers
// (api.TaskRequest, api.TimerRequest), byte for byte what courier wrote before those bodies
// were declared in api alone, so relays of any version read them; and rows written then parse
// to the same request now.
func TestRowShapes(t *testing.T) {
	s, _ := testenv.Store(t, "sqlite")
	fire := time.Date(2026, 11, 28, 10, 0, 0, 0, time.FixedZone("CET", 3600))
	var taskIDs, bareIDs, timerIDs []int64
	require.NoError(t, s.DB().RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
		id, err := outbox.InsertTask(ctx, tx, courier.TaskRequest{TaskID: "doc-1", Version: 3, Priority: 2, Queue: "docparse",
			Payload: json.RawMessage(`{"a":1}`), ConcurrencyKey: "t-7",
			Overrides: courier.TaskOverrides{PendingTimeout: 90 * time.Minute, HeartbeatTimeout: 30 * time.Second, MaxAttempts: 4}})
		taskIDs = append(taskIDs, id)
		if err != nil {
			return err
		}
		id, err = outbox.InsertTask(ctx, tx, courier.TaskRequest{TaskID: "doc-1", Version: 1})
		bareIDs = append(bareIDs, id)
		if err != nil {
			return err
		}
		id, err = outbox.ArmTimer(ctx, tx, outbox.Timer{BizType: "orders", BizID: "o-1", FireAt: fire, Payload: json.RawMessage(`{"a":1}`)})
		timerIDs = append(timerIDs, id)
		return err
	}))
	rows := all(t, s)
	const task = `{"task_id":"doc-1","task_version":3,"priority":2,"queue":"docparse","payload":{"a":1},` +
		`"overrides":{"pending_timeout":"1h30m0s","heartbeat_timeout":"30s","max_attempts":4},"concurrency_key":"t-7"}`
	require.Equal(t, task, string(rows[taskIDs[0]].Payload))
	require.Equal(t, `{"task_id":"doc-1","task_version":1,"priority":3,"queue":"default","payload":null}`, string(rows[bareIDs[0]].Payload))
	require.Equal(t, `{"biz_type":"orders","biz_id":"o-1","fire_at":"2026-11-28T09:00:00Z","payload":{"a":1}}`, string(rows[timerIDs[0]].Payload))

	r, err := outbox.ParseTaskRow([]byte(task))
	require.NoError(t, err)
	require.Equal(t, courier.TaskRequest{TaskID: "doc-1", Version: 3, Priority: 2, Queue: "docparse", Payload: json.RawMessage(`{"a":1}`),
		ConcurrencyKey: "t-7", Overrides: courier.TaskOverrides{PendingTimeout: 90 * time.Minute, HeartbeatTimeout: 30 * time.Second, MaxAttempts: 4}}, r)
}

// A task row another producer wrote with a bad duration or an unknown field is refused as a
// validation error (the relay leaves the row dead with it); a bad duration names its field.
func TestTaskRowRefusals(t *testing.T) {
	for _, bad := range []string{`"0s"`, `"-5m"`, `"soon"`, `30`} {
		_, err := outbox.ParseTaskRow([]byte(`{"task_id":"d","task_version":1,"overrides":{"processing_timeout":` + bad + `}}`))
		var ce *courier.Error
		require.ErrorAs(t, err, &ce, bad)
		require.Equal(t, courier.CodeValidation, ce.Code, bad)
		require.Equal(t, `overrides.processing_timeout must be a positive duration such as "30m"`, ce.Message, bad)
		require.Equal(t, "overrides.processing_timeout", ce.Details["field"], bad)
	}
	_, err := outbox.ParseTaskRow([]byte(`{"task_id":"d","task_version":1,"colour":"red"}`))
	require.Equal(t, courier.CodeValidation, courier.ErrorCode(err))
	require.Contains(t, err.Error(), "task row payload is not a task insert")
	r, err := outbox.ParseTaskRow([]byte(`{"task_id":"d","task_version":1,"overrides":{"pending_timeout":""}}`))
	require.NoError(t, err, `"" is no override`)
	require.Zero(t, r.Overrides)
}
