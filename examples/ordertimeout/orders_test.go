package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/outbox"
)

type outboxRow struct {
	Topic, Key, Status string
	Payload            []byte
}

func outboxRows(t *testing.T, e *testEnv) []outboxRow {
	t.Helper()
	rows, err := e.db.QueryContext(context.Background(), `SELECT topic, "key", status, payload FROM courier_outbox ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var r outboxRow
		require.NoError(t, rows.Scan(&r.Topic, &r.Key, &r.Status, &r.Payload))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestCreateOrderArmsItsTimerInTheSameTransaction(t *testing.T) {
	f := newFakeCourier(t)
	e := newTestEnv(t, f.srv.URL)

	before := time.Now()
	status, body := e.call(t, http.MethodPost, "/orders", `{"item":"book"}`)
	after := time.Now()
	require.Equal(t, http.StatusCreated, status, body)
	id, _ := body["id"].(string)
	require.NotEmpty(t, id)
	require.Equal(t, "book", body["item"])
	require.Equal(t, StatusOpen, body["status"])
	timer := body["timer"].(map[string]any)
	require.Equal(t, "timer/order.close/"+id, timer["workflow_id"], "the response names the Temporal workflow")

	require.Equal(t, 1, count(t, e.db, `SELECT count(*) FROM orders`))
	require.Equal(t, StatusOpen, e.status(t, id))

	rows := outboxRows(t, e)
	require.Len(t, rows, 1)
	require.Equal(t, outbox.TimerTopic, rows[0].Topic)
	require.Equal(t, "courier.timer.arm", rows[0].Topic)
	require.Equal(t, "order.close/"+id, rows[0].Key)
	require.Equal(t, "pending", rows[0].Status)
	var tr api.TimerRequest
	require.NoError(t, json.Unmarshal(rows[0].Payload, &tr))
	require.Equal(t, "order.close", tr.BizType)
	require.Equal(t, id, tr.BizID)
	require.NotNil(t, tr.FireAt)
	require.False(t, tr.FireAt.Before(before.Add(30*time.Minute).Add(-time.Millisecond)), "fire_at = now + timeout: %s", tr.FireAt)
	require.False(t, tr.FireAt.After(after.Add(30*time.Minute)), "fire_at = now + timeout: %s", tr.FireAt)
	require.JSONEq(t, `{"order_id":"`+id+`"}`, string(tr.Payload))

	require.Empty(t, f.Calls(), "creating an order never calls courier: the relay arms the timer")

	// GET shows it; a second order gets its own id and its own timer row.
	status, got := e.call(t, http.MethodGet, "/orders/"+id, "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, id, got["id"])
	require.Equal(t, StatusOpen, got["status"])
	require.Nil(t, got["closed_at"])
	id2 := e.createOrder(t, "pen")
	require.NotEqual(t, id, id2)
	rows = outboxRows(t, e)
	require.Len(t, rows, 2)
	require.Equal(t, "order.close/"+id2, rows[1].Key)

	status, _ = e.call(t, http.MethodGet, "/orders/o-nope", "")
	require.Equal(t, http.StatusNotFound, status)
}

func TestCreateOrderUsesTheConfiguredTimeoutAndBizType(t *testing.T) {
	e := newTestEnv(t, "http://127.0.0.1:1")
	fixed := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	e.svc.Now = func() time.Time { return fixed }
	e.svc.Timeout = 20 * time.Second
	e.svc.BizType = "shop.order-close"

	id := e.createOrder(t, "book")
	rows := outboxRows(t, e)
	require.Len(t, rows, 1)
	var tr api.TimerRequest
	require.NoError(t, json.Unmarshal(rows[0].Payload, &tr))
	require.Equal(t, "shop.order-close", tr.BizType)
	require.Equal(t, id, tr.BizID)
	require.NotNil(t, tr.FireAt)
	require.True(t, fixed.Add(20*time.Second).Equal(*tr.FireAt), "fire_at %s", tr.FireAt)
}

// If arming the timer fails, the order insert rolls back with it: no order without its timer.
func TestCreateOrderWritesNothingWhenTheOutboxInsertFails(t *testing.T) {
	e := newTestEnv(t, "http://127.0.0.1:1")
	_, err := e.db.ExecContext(context.Background(), `ALTER TABLE courier_outbox RENAME TO courier_outbox_gone`)
	require.NoError(t, err)

	status, body := e.call(t, http.MethodPost, "/orders", `{"item":"book"}`)
	require.Equal(t, http.StatusInternalServerError, status, body)
	require.Equal(t, 0, count(t, e.db, `SELECT count(*) FROM orders`), "the order must roll back with its timer row")
	require.Equal(t, 0, count(t, e.db, `SELECT count(*) FROM courier_outbox_gone`))
}

func TestCreateOrderRejectsBadRequestsWithoutWriting(t *testing.T) {
	e := newTestEnv(t, "http://127.0.0.1:1")
	for name, body := range map[string]string{
		"not json":   `{"item":`,
		"wrong type": `{"item": 42}`,
		"no item":    `{}`,
		"blank item": `{"item":"   "}`,
		"two values": `{"item":"a"}{"item":"b"}`,
	} {
		status, out := e.call(t, http.MethodPost, "/orders", body)
		require.Equal(t, http.StatusBadRequest, status, name)
		require.NotEmpty(t, out["error"], name)
	}
	require.Equal(t, 0, count(t, e.db, `SELECT count(*) FROM orders`))
	require.Empty(t, outboxRows(t, e))
}

func TestOrdersCommandNeedsAValidSecret(t *testing.T) {
	t.Setenv("ORDER_TIMER_SECRET", "")
	db := "sqlite:" + t.TempDir() + "/orders.db"
	err := run(context.Background(), []string{"orders", "--db", db, "--http", "127.0.0.1:0"}, nil, quietLogger())
	require.ErrorContains(t, err, "--secret")
	err = run(context.Background(), []string{"orders", "--db", db, "--http", "127.0.0.1:0", "--secret", "not-a-secret"}, nil, quietLogger())
	require.ErrorContains(t, err, "whsec_")
}
