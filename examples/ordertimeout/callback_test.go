package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/webhook"
)

// callbackBody is the JSON courier POSTs when the order's timer fires.
func callbackBody(t *testing.T, deliveryID, orderID string, attempt int32) []byte {
	t.Helper()
	b, err := json.Marshal(api.TimerCallback{
		DeliveryID: deliveryID, BizType: "order.close", BizID: orderID,
		FireAt: time.Now().UTC().Truncate(time.Second), Attempt: attempt,
		Payload: json.RawMessage(`{"order_id":"` + orderID + `"}`),
	})
	require.NoError(t, err)
	return b
}

func closedAt(t *testing.T, e *testEnv, id string) any {
	t.Helper()
	var v any
	require.NoError(t, e.db.QueryRowContext(context.Background(), `SELECT closed_at FROM orders WHERE id = ?`, id).Scan(&v))
	return v
}

func TestCallbackClosesAnOpenOrderExactlyOnce(t *testing.T) {
	e := newTestEnv(t, newFakeCourier(t).srv.URL)
	id := e.createOrder(t, "book")

	status, out := e.postCallback(t, e.secret, "d-1", callbackBody(t, "d-1", id, 1))
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, OutcomeClosed, out["outcome"])
	require.Equal(t, id, out["order_id"])
	require.Equal(t, StatusClosed, e.status(t, id))
	first := closedAt(t, e, id)
	require.NotNil(t, first)

	_, got := e.call(t, http.MethodGet, "/orders/"+id, "")
	require.Equal(t, StatusClosed, got["status"])
	require.NotEmpty(t, got["closed_at"])

	// Courier retries with the same webhook-id (= delivery_id), freshly signed: 2xx, nothing changes.
	status, out = e.postCallback(t, e.secret, "d-1", callbackBody(t, "d-1", id, 2))
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, true, out["duplicate"])
	require.Equal(t, OutcomeClosed, out["outcome"], "a duplicate reports what the first delivery did")
	require.Equal(t, StatusClosed, e.status(t, id))
	require.Equal(t, first, closedAt(t, e, id), "closed_at is not rewritten")
	require.Equal(t, 1, count(t, e.db, `SELECT count(*) FROM processed_deliveries WHERE delivery_id = 'd-1'`))

	// A different delivery for an order that is already closed changes nothing either.
	status, out = e.postCallback(t, e.secret, "d-other", callbackBody(t, "d-other", id, 1))
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, OutcomeAlreadyClosed, out["outcome"])
	require.Equal(t, first, closedAt(t, e, id))

	// A closed order cannot be paid any more.
	status, _ = e.call(t, http.MethodPost, "/orders/"+id+"/pay", "")
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, StatusClosed, e.status(t, id))
}

func TestCallbackLeavesAPaidOrderPaid(t *testing.T) {
	e := newTestEnv(t, newFakeCourier(t).srv.URL)
	id := e.createOrder(t, "book")
	status, _ := e.call(t, http.MethodPost, "/orders/"+id+"/pay", "")
	require.Equal(t, http.StatusOK, status)

	status, out := e.postCallback(t, e.secret, "d-paid", callbackBody(t, "d-paid", id, 1))
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, OutcomeIgnoredPaid, out["outcome"])
	require.Equal(t, StatusPaid, e.status(t, id))
	require.Nil(t, closedAt(t, e, id))
}

func TestCallbackRejectsBadSignaturesWithoutChangingAnything(t *testing.T) {
	e := newTestEnv(t, newFakeCourier(t).srv.URL)
	id := e.createOrder(t, "book")
	body := callbackBody(t, "d-bad", id, 1)

	other, err := webhook.GenerateSecret()
	require.NoError(t, err)
	status, _ := e.postCallback(t, other, "d-bad", body)
	require.Equal(t, http.StatusUnauthorized, status, "signed with another secret")

	// Signed correctly, then the body was changed.
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+CallbackPath, nil)
	require.NoError(t, err)
	signer, err := webhook.NewSigner(e.secret)
	require.NoError(t, err)
	require.NoError(t, signer.Sign(req.Header, "d-bad", time.Now(), body))
	status = e.postRaw(t, req.Header, callbackBody(t, "d-bad", id, 2))
	require.Equal(t, http.StatusUnauthorized, status, "tampered body")

	// Correct signature over a timestamp older than the tolerance.
	req.Header = http.Header{}
	require.NoError(t, signer.Sign(req.Header, "d-bad", time.Now().Add(-time.Hour), body))
	status = e.postRaw(t, req.Header, body)
	require.Equal(t, http.StatusUnauthorized, status, "stale timestamp")

	// No signature at all.
	status = e.postRaw(t, http.Header{}, body)
	require.Equal(t, http.StatusUnauthorized, status, "unsigned")

	require.Equal(t, StatusOpen, e.status(t, id))
	require.Equal(t, 0, count(t, e.db, `SELECT count(*) FROM processed_deliveries`))

	// The genuine delivery still works afterwards.
	status, out := e.postCallback(t, e.secret, "d-bad", body)
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, StatusClosed, e.status(t, id))
}

func TestCallbackForAnUnknownOrderAnswers2xx(t *testing.T) {
	e := newTestEnv(t, newFakeCourier(t).srv.URL)
	status, out := e.postCallback(t, e.secret, "d-x", callbackBody(t, "d-x", "o-unknown", 1))
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, OutcomeUnknownOrder, out["outcome"])
	require.Equal(t, 0, count(t, e.db, `SELECT count(*) FROM orders`))
}

// A delivery that fails (500) is retried by courier with the same webhook-id. The retry must be
// processed, not refused as a replay: a 401 would be a permanent failure and the order would
// never close.
func TestCallbackRetryAfterAFailureClosesTheOrder(t *testing.T) {
	e := newTestEnv(t, newFakeCourier(t).srv.URL)
	id := e.createOrder(t, "book")
	ctx := context.Background()

	_, err := e.db.ExecContext(ctx, `ALTER TABLE orders RENAME TO orders_away`)
	require.NoError(t, err)
	status, _ := e.postCallback(t, e.secret, "d-retry", callbackBody(t, "d-retry", id, 1))
	require.Equal(t, http.StatusInternalServerError, status, "a database failure is retryable")
	require.Equal(t, 0, count(t, e.db, `SELECT count(*) FROM processed_deliveries`), "the failed attempt rolled back")
	_, err = e.db.ExecContext(ctx, `ALTER TABLE orders_away RENAME TO orders`)
	require.NoError(t, err)

	status, out := e.postCallback(t, e.secret, "d-retry", callbackBody(t, "d-retry", id, 2))
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, OutcomeClosed, out["outcome"])
	require.Equal(t, StatusClosed, e.status(t, id))
}

// postRaw sends body with exactly the headers h.
func (e *testEnv) postRaw(t *testing.T, h http.Header, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+CallbackPath, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header = h.Clone()
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	return resp.StatusCode
}
