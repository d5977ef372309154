package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/mq/natsmq"
	"github.com/courier-oss/courier/webhook"
)

type bizTypes map[string]courier.BizType

func (b bizTypes) GetBizType(_ context.Context, name string) (courier.BizType, error) {
	if t, ok := b[name]; ok {
		return t.WithDefaults(), nil
	}
	return courier.BizType{}, courier.Errorf(courier.CodeNotFound, "business type %q not found", name)
}

func deliver(t *testing.T, a *activities.Timers, p contract.DeliverTimerParams) (int, error) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a.Deliver)
	v, err := env.ExecuteActivity(a.Deliver, p)
	if err != nil {
		return 0, err
	}
	var n int
	require.NoError(t, v.Get(&n))
	return n, nil
}

func appErr(t *testing.T, err error) *temporal.ApplicationError {
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "want an application error, got %v", err)
	return ae
}

func TestTimerDeliverHTTP(t *testing.T) {
	secret, _ := webhook.GenerateSecret()
	verifier, _ := webhook.NewVerifier(secret)
	var status atomic.Int64
	status.Store(200)
	var got api.TimerCallback
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := verifier.Verify(body, r.Header); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		_ = json.Unmarshal(body, &got)
		if status.Load() == 429 {
			w.Header().Set("Retry-After", "42")
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	types := bizTypes{"order.close": {Name: "order.close", Delivery: courier.DeliveryHTTP, CallbackURL: srv.URL, Secrets: []string{secret}}}
	dev := activities.NewTimers(types, nil, true, nil)
	p := contract.DeliverTimerParams{BizType: "order.close", BizID: "o-1", DeliveryID: "run-1",
		FireAt: time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC), Payload: []byte(`{"order":"o-1"}`)}

	n, err := deliver(t, dev, p)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "o-1", got.BizID)
	require.Equal(t, "run-1", got.DeliveryID)
	require.JSONEq(t, `{"order":"o-1"}`, string(got.Payload))

	status.Store(503)
	_, err = deliver(t, dev, withID(p, "run-2"))
	require.False(t, appErr(t, err).NonRetryable(), "5xx is retried")

	status.Store(429)
	_, err = deliver(t, dev, withID(p, "run-3"))
	ae := appErr(t, err)
	require.False(t, ae.NonRetryable())
	require.Equal(t, 42*time.Second, ae.NextRetryDelay(), "Retry-After is honoured")

	status.Store(404)
	_, err = deliver(t, dev, withID(p, "run-4"))
	ae = appErr(t, err)
	require.True(t, ae.NonRetryable(), "other 4xx fail at once")
	require.Equal(t, contract.ErrTypePermanentDelivery, ae.Type())

	// Outside dev mode the same loopback target is refused, permanently.
	prod := activities.NewTimers(types, nil, false, nil)
	_, err = deliver(t, prod, withID(p, "run-5"))
	require.True(t, appErr(t, err).NonRetryable())

	_, err = deliver(t, dev, contract.DeliverTimerParams{BizType: "nope", BizID: "x", DeliveryID: "d"})
	require.Equal(t, contract.ErrTypeUnknownBizType, appErr(t, err).Type())
}

func withID(p contract.DeliverTimerParams, id string) contract.DeliverTimerParams {
	p.DeliveryID = id
	return p
}

func TestTimerDeliverMQ(t *testing.T) {
	srv, err := embeddednats.Start(embeddednats.Config{Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	defer srv.Shutdown()
	pub, err := natsmq.Dial(srv.URL(), "test")
	require.NoError(t, err)
	defer pub.Close()
	js, _ := jetstream.New(pub.Conn())
	st, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "COUPONS", Subjects: []string{"coupons.>"}})
	require.NoError(t, err)
	types := bizTypes{
		"coupon.expiry": {Name: "coupon.expiry", Delivery: courier.DeliveryMQ, Topic: "coupons.expiring"},
		"lost":          {Name: "lost", Delivery: courier.DeliveryMQ, Topic: "nowhere.at.all"},
	}
	a := activities.NewTimers(types, pub, false, nil)
	_, err = deliver(t, a, contract.DeliverTimerParams{BizType: "coupon.expiry", BizID: "c-9", DeliveryID: "run-1", Payload: []byte(`{"coupon":"c-9"}`)})
	require.NoError(t, err)
	msg, err := st.GetMsg(context.Background(), 1)
	require.NoError(t, err)
	require.Equal(t, "timer/coupon.expiry/c-9/run-1", msg.Header.Get(mq.HeaderMessageID))
	var body api.TimerCallback
	require.NoError(t, json.Unmarshal(msg.Data, &body))
	require.JSONEq(t, `{"coupon":"c-9"}`, string(body.Payload))

	_, err = deliver(t, a, contract.DeliverTimerParams{BizType: "lost", BizID: "x", DeliveryID: "r"})
	require.True(t, appErr(t, err).NonRetryable(), "a topic without a stream fails at once")
}
