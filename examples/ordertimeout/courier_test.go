package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

const conflictJSON = `{"error":{"code":"conflict","message":"the timer already fired"}}`

func TestPayCancelsTheTimerThroughCourier(t *testing.T) {
	f := newFakeCourier(t)
	e := newTestEnv(t, f.srv.URL)
	id := e.createOrder(t, "book")

	f.setRespond(func(r *http.Request) (int, string) {
		return http.StatusOK, `{"biz_type":"order.close","biz_id":"` + id + `","state":"cancelled"}`
	})
	status, out := e.call(t, http.MethodPost, "/orders/"+id+"/pay", "")
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, StatusPaid, out["status"])
	require.Equal(t, CancelDone, out["timer_cancel"])
	require.Equal(t, StatusPaid, e.status(t, id))

	calls := f.Calls()
	require.Len(t, calls, 1)
	require.Equal(t, http.MethodDelete, calls[0].Method)
	require.Equal(t, "/v1/timers/order.close/"+id, calls[0].Path)
	require.Equal(t, "Bearer "+testKey, calls[0].Auth)

	// Paying again is harmless: still paid, and the cancel is simply asked again.
	f.setRespond(func(r *http.Request) (int, string) { return http.StatusConflict, conflictJSON })
	status, out = e.call(t, http.MethodPost, "/orders/"+id+"/pay", "")
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, StatusPaid, out["status"])
}

// Courier answers 409 when the timer already fired: the order is paid all the same, and the
// callback (already delivered or about to be) ignores paid orders.
func TestPayWhenTheTimerAlreadyFiredStillPays(t *testing.T) {
	f := newFakeCourier(t)
	f.setRespond(func(r *http.Request) (int, string) { return http.StatusConflict, conflictJSON })
	e := newTestEnv(t, f.srv.URL)
	id := e.createOrder(t, "book")

	status, out := e.call(t, http.MethodPost, "/orders/"+id+"/pay", "")
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, StatusPaid, out["status"])
	require.Equal(t, CancelTooLate, out["timer_cancel"])
	require.Equal(t, StatusPaid, e.status(t, id))
	require.Len(t, f.Calls(), 1)

	status, out = e.postCallback(t, e.secret, "d-late", callbackBody(t, "d-late", id, 1))
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, StatusPaid, e.status(t, id), "the late callback leaves the paid order alone")
}

func TestPayWhenCourierIsUnreachableOrRefusesStillPays(t *testing.T) {
	down := newFakeCourier(t)
	url := down.srv.URL
	down.srv.Close()
	e := newTestEnv(t, url)
	id := e.createOrder(t, "book")
	status, out := e.call(t, http.MethodPost, "/orders/"+id+"/pay", "")
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, CancelFailed, out["timer_cancel"])
	require.Equal(t, StatusPaid, e.status(t, id))

	// A wrong API key (courier answers 401) does not fail the payment either.
	f := newFakeCourier(t)
	e = newTestEnv(t, f.srv.URL)
	e.svc.Courier.Key = "wrong"
	id = e.createOrder(t, "book")
	status, out = e.call(t, http.MethodPost, "/orders/"+id+"/pay", "")
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, CancelFailed, out["timer_cancel"])
	require.Equal(t, StatusPaid, e.status(t, id))
	require.Equal(t, "Bearer wrong", f.Calls()[0].Auth)

	// Not armed yet (the relay has not created the timer): 404 from courier, still paid.
	f.setRespond(func(r *http.Request) (int, string) {
		return http.StatusNotFound, `{"error":{"code":"not_found","message":"no timer"}}`
	})
	e.svc.Courier.Key = testKey
	id = e.createOrder(t, "pen")
	status, out = e.call(t, http.MethodPost, "/orders/"+id+"/pay", "")
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, CancelNotArmed, out["timer_cancel"])
}

func TestPayUnknownOrClosedOrderDoesNotCallCourier(t *testing.T) {
	f := newFakeCourier(t)
	e := newTestEnv(t, f.srv.URL)
	status, _ := e.call(t, http.MethodPost, "/orders/o-missing/pay", "")
	require.Equal(t, http.StatusNotFound, status)

	id := e.createOrder(t, "book")
	status, _ = e.postCallback(t, e.secret, "d-1", callbackBody(t, "d-1", id, 1))
	require.Equal(t, http.StatusOK, status)
	status, _ = e.call(t, http.MethodPost, "/orders/"+id+"/pay", "")
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, StatusClosed, e.status(t, id))
	require.Empty(t, f.Calls())
}

func TestExtendReschedulesTheTimerThroughCourier(t *testing.T) {
	f := newFakeCourier(t)
	e := newTestEnv(t, f.srv.URL)
	id := e.createOrder(t, "book")

	f.setRespond(func(r *http.Request) (int, string) {
		return http.StatusOK, `{"biz_type":"order.close","biz_id":"` + id + `","state":"scheduled","fire_at":"2026-11-22T10:40:00Z","version":2}`
	})
	status, out := e.call(t, http.MethodPost, "/orders/"+id+"/extend", `{"delay":"10m"}`)
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, StatusOpen, out["status"])
	timer := out["timer"].(map[string]any)
	require.Equal(t, "2026-11-22T10:40:00Z", timer["fire_at"], "courier's timer is passed through")

	calls := f.Calls()
	require.Len(t, calls, 1)
	require.Equal(t, http.MethodPatch, calls[0].Method)
	require.Equal(t, "/v1/timers/order.close/"+id, calls[0].Path)
	require.Equal(t, "Bearer "+testKey, calls[0].Auth)
	require.JSONEq(t, `{"delay":"10m0s"}`, string(calls[0].Body))

	// fire_at is passed on as RFC 3339.
	status, out = e.call(t, http.MethodPost, "/orders/"+id+"/extend", `{"fire_at":"2099-01-02T03:04:05Z"}`)
	require.Equal(t, http.StatusOK, status, out)
	calls = f.Calls()
	require.Len(t, calls, 2)
	require.JSONEq(t, `{"fire_at":"2099-01-02T03:04:05Z"}`, string(calls[1].Body))
}

func TestExtendRelaysCourierConflict(t *testing.T) {
	f := newFakeCourier(t)
	f.setRespond(func(r *http.Request) (int, string) { return http.StatusConflict, conflictJSON })
	e := newTestEnv(t, f.srv.URL)
	id := e.createOrder(t, "book")

	status, out := e.call(t, http.MethodPost, "/orders/"+id+"/extend", `{"delay":"10m"}`)
	require.Equal(t, http.StatusConflict, status, out)
	require.Contains(t, out["error"], "the timer already fired")
	require.Len(t, f.Calls(), 1)
	require.Equal(t, StatusOpen, e.status(t, id))

	// Courier unreachable: 502, not a silent success.
	f.srv.Close()
	status, _ = e.call(t, http.MethodPost, "/orders/"+id+"/extend", `{"delay":"10m"}`)
	require.Equal(t, http.StatusBadGateway, status)
}

func TestExtendRejectsBadRequestsWithoutCallingCourier(t *testing.T) {
	f := newFakeCourier(t)
	e := newTestEnv(t, f.srv.URL)
	id := e.createOrder(t, "book")
	for name, body := range map[string]string{
		"no timing":     `{}`,
		"bad delay":     `{"delay":"soon"}`,
		"zero delay":    `{"delay":"0s"}`,
		"negative":      `{"delay":"-5m"}`,
		"both":          `{"delay":"10m","fire_at":"2099-01-01T00:00:00Z"}`,
		"past fire_at":  `{"fire_at":"2000-01-01T00:00:00Z"}`,
		"not json":      `{"delay":`,
		"wrong fire_at": `{"fire_at":"tomorrow"}`,
	} {
		status, out := e.call(t, http.MethodPost, "/orders/"+id+"/extend", body)
		require.Equal(t, http.StatusBadRequest, status, name)
		require.NotEmpty(t, out["error"], name)
	}
	status, _ := e.call(t, http.MethodPost, "/orders/o-missing/extend", `{"delay":"10m"}`)
	require.Equal(t, http.StatusNotFound, status)

	// A paid order has no timer left to extend.
	paid := e.createOrder(t, "pen")
	_, err := e.svc.PayOrder(context.Background(), paid)
	require.NoError(t, err)
	status, _ = e.call(t, http.MethodPost, "/orders/"+paid+"/extend", `{"delay":"10m"}`)
	require.Equal(t, http.StatusConflict, status)
	require.Empty(t, f.Calls())
}

func TestSetupCreatesTheBizTypeAndPrintsTheSecret(t *testing.T) {
	f := newFakeCourier(t)
	f.setRespond(func(r *http.Request) (int, string) {
		if r.Method == http.MethodGet {
			return http.StatusNotFound, `{"error":{"code":"not_found","message":"business type \"order.close\" not found"}}`
		}
		return http.StatusCreated, `{"name":"order.close","delivery":"http","secrets_count":1,"generated_secret":"whsec_NEW"}`
	})
	var out bytes.Buffer
	err := run(context.Background(), []string{"setup", "--courier-url", f.srv.URL, "--courier-key", testKey}, &out, quietLogger())
	require.NoError(t, err)
	require.Contains(t, out.String(), "export ORDER_TIMER_SECRET='whsec_NEW'")

	calls := f.Calls()
	require.Len(t, calls, 2)
	require.Equal(t, http.MethodGet, calls[0].Method)
	require.Equal(t, "/v1/biz-types/order.close", calls[0].Path)
	require.Equal(t, http.MethodPut, calls[1].Method)
	require.Equal(t, "/v1/biz-types/order.close", calls[1].Path)
	require.Equal(t, "Bearer "+testKey, calls[1].Auth)
	var body map[string]any
	require.NoError(t, json.Unmarshal(calls[1].Body, &body))
	require.Equal(t, map[string]any{"delivery": "http", "callback_url": "http://127.0.0.1:8091/callbacks/order-close"}, body)
}

// A PUT without secrets on an existing type makes courier replace the secret, so setup leaves
// an existing type alone unless --rotate is given.
func TestSetupLeavesAnExistingBizTypeAlone(t *testing.T) {
	f := newFakeCourier(t)
	f.setRespond(func(r *http.Request) (int, string) {
		if r.Method == http.MethodGet {
			return http.StatusOK, `{"name":"order.close","delivery":"http","callback_url":"http://127.0.0.1:8091/callbacks/order-close","secrets_count":1}`
		}
		return http.StatusOK, `{"name":"order.close","delivery":"http","secrets_count":1,"generated_secret":"whsec_ROTATED"}`
	})
	var out bytes.Buffer
	cc := &CourierClient{BaseURL: f.srv.URL, Key: testKey}
	require.NoError(t, Setup(context.Background(), cc, "order.close", defaultCallbackURL, false, &out))
	require.Contains(t, out.String(), "already exists")
	require.Contains(t, out.String(), "reuse")
	require.NotContains(t, out.String(), "whsec_")
	calls := f.Calls()
	require.Len(t, calls, 1, "no PUT: it would replace the secret")
	require.Equal(t, http.MethodGet, calls[0].Method)

	out.Reset()
	require.NoError(t, Setup(context.Background(), cc, "order.close", defaultCallbackURL, true, &out))
	require.Contains(t, out.String(), "REPLACED")
	require.Contains(t, out.String(), "export ORDER_TIMER_SECRET='whsec_ROTATED'")
	calls = f.Calls()
	require.Len(t, calls, 2)
	require.Equal(t, http.MethodPut, calls[1].Method)
}

func TestSetupReportsCourierErrors(t *testing.T) {
	f := newFakeCourier(t)
	err := Setup(context.Background(), &CourierClient{BaseURL: f.srv.URL}, "order.close", defaultCallbackURL, false, &bytes.Buffer{})
	require.ErrorContains(t, err, "admin API key")
	require.Empty(t, f.Calls())

	err = Setup(context.Background(), &CourierClient{BaseURL: f.srv.URL, Key: "wrong"}, "order.close", defaultCallbackURL, false, &bytes.Buffer{})
	require.ErrorContains(t, err, "bad API key")

	f.setRespond(func(r *http.Request) (int, string) {
		if r.Method == http.MethodGet {
			return http.StatusNotFound, `{}`
		}
		return http.StatusUnprocessableEntity, `{"error":{"code":"validation_failed","message":"callback_url must be https"}}`
	})
	err = Setup(context.Background(), &CourierClient{BaseURL: f.srv.URL, Key: testKey}, "order.close", defaultCallbackURL, false, &bytes.Buffer{})
	require.ErrorContains(t, err, "callback_url must be https")
}
