package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"

	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/schema"
	"github.com/courier-oss/courier/webhook"
)

// Order statuses.
const (
	StatusOpen   = "open"
	StatusPaid   = "paid"
	StatusClosed = "closed"
)

// CallbackPath is where courier delivers the fired close-order timers.
const CallbackPath = "/callbacks/order-close"

// timeLayout stores times as fixed-width UTC text, so they sort and compare as strings.
const timeLayout = "2006-01-02T15:04:05.000000Z"

// ordersDDL creates the service's own tables. processed_deliveries is the callback's
// idempotency record: its primary key admits each courier delivery id once.
var ordersDDL = []string{
	`CREATE TABLE IF NOT EXISTS orders (
    id         TEXT PRIMARY KEY,
    item       TEXT NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('open', 'paid', 'closed')),
    created_at TEXT NOT NULL,
    closed_at  TEXT
)`,
	`CREATE TABLE IF NOT EXISTS processed_deliveries (
    delivery_id  TEXT PRIMARY KEY,
    order_id     TEXT NOT NULL,
    outcome      TEXT NOT NULL,
    processed_at TEXT NOT NULL
)`,
}

// SetupDB installs courier's outbox table and the service's tables in its SQLite database.
// Both steps are idempotent, so it runs on every start.
func SetupDB(ctx context.Context, db *bun.DB) error {
	if name := db.Dialect().Name(); name != dialect.SQLite {
		return fmt.Errorf("orders: this example runs on SQLite (sqlite:PATH), not %s", name)
	}
	if err := schema.Up(ctx, db, schema.Outbox); err != nil {
		return fmt.Errorf("orders: install outbox table: %w", err)
	}
	for _, ddl := range ordersDDL {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("orders: create tables: %w", err)
		}
	}
	return nil
}

// Order is a row of the orders table.
type Order struct {
	ID        string     `json:"id"`
	Item      string     `json:"item"`
	Status    string     `json:"status"`
	CreatedAt time.Time  `json:"created_at"`
	ClosedAt  *time.Time `json:"closed_at,omitempty"`
}

// ArmedTimer describes the timer an order's transaction armed through the outbox.
type ArmedTimer struct {
	BizType    string    `json:"biz_type"`
	BizID      string    `json:"biz_id"`
	FireAt     time.Time `json:"fire_at"`
	WorkflowID string    `json:"workflow_id"` // find it in the Temporal UI
}

// OrderResponse is an order plus what an endpoint did to its timer.
type OrderResponse struct {
	Order
	Timer       any    `json:"timer,omitempty"`        // create: the armed timer; extend: courier's timer
	TimerCancel string `json:"timer_cancel,omitempty"` // pay: what courier said to the cancel
}

// ClosePayload is the timer payload delivered back with the callback.
type ClosePayload struct {
	OrderID string `json:"order_id"`
}

// Errors of the order operations.
var (
	ErrNotFound  = errors.New("order not found")
	ErrClosed    = errors.New("order is closed")
	errBadTiming = errors.New(`give "delay" (a positive duration such as "10m") or "fire_at" (RFC 3339, in the future)`)
)

// Outcomes of pay's timer cancel.
const (
	CancelDone     = "cancelled"
	CancelTooLate  = "already_fired_or_cancelled" // courier 409: the callback ignores paid orders
	CancelNotArmed = "not_armed_yet"              // courier 404: the relay has not created it yet
	CancelFailed   = "cancel_failed"              // courier unreachable or refused: logged
)

// Service is the orders service.
type Service struct {
	DB       *bun.DB
	Courier  *CourierClient
	Verifier *webhook.Verifier // checks callbacks against the business type's secret
	BizType  string            // courier business type of the close-order timers
	Timeout  time.Duration     // how long an unpaid order stays open
	Log      *slog.Logger
	Now      func() time.Time // nil means time.Now
}

const maxRequestBytes = 64 << 10

// Handler returns the service's HTTP routes.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", s.handleCreate)
	mux.HandleFunc("GET /orders/{id}", s.handleGet)
	mux.HandleFunc("POST /orders/{id}/pay", s.handlePay)
	mux.HandleFunc("POST /orders/{id}/extend", s.handleExtend)
	mux.Handle("POST "+CallbackPath, verifyCallbacks(s.Verifier, http.HandlerFunc(s.handleCallback)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.DB.PingContext(r.Context()); err != nil {
			writeError(w, http.StatusServiceUnavailable, "database unavailable")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return mux
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

func (s *Service) logger() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// CreateOrder inserts an open order and arms its close-order timer in ONE transaction. If
// either write fails, the transaction rolls back and nothing exists: courier's relay only
// ever sees the timer row of an order that committed.
func (s *Service) CreateOrder(ctx context.Context, item string) (Order, ArmedTimer, error) {
	now := s.now().Truncate(time.Microsecond)
	id, err := newOrderID()
	if err != nil {
		return Order{}, ArmedTimer{}, err
	}
	o := Order{ID: id, Item: item, Status: StatusOpen, CreatedAt: now}
	t := ArmedTimer{BizType: s.BizType, BizID: id, FireAt: now.Add(s.Timeout),
		WorkflowID: "timer/" + s.BizType + "/" + id}
	payload, err := json.Marshal(ClosePayload{OrderID: id})
	if err != nil {
		return Order{}, ArmedTimer{}, err
	}
	err = s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO orders (id, item, status, created_at) VALUES (?, ?, ?, ?)`,
			o.ID, o.Item, StatusOpen, now.Format(timeLayout)); err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		_, err := outbox.ArmTimer(ctx, tx, outbox.Timer{BizType: t.BizType, BizID: t.BizID, FireAt: t.FireAt, Payload: payload})
		return err
	})
	if err != nil {
		return Order{}, ArmedTimer{}, err
	}
	return o, t, nil
}

// GetOrder reads one order, or ErrNotFound.
func (s *Service) GetOrder(ctx context.Context, id string) (Order, error) {
	return getOrder(ctx, s.DB, id)
}

func getOrder(ctx context.Context, db bun.IDB, id string) (Order, error) {
	var (
		o                 Order
		created           string
		closed            sql.NullString
		createdT, closedT time.Time
		err               error
	)
	err = db.QueryRowContext(ctx, `SELECT id, item, status, created_at, closed_at FROM orders WHERE id = ?`, id).
		Scan(&o.ID, &o.Item, &o.Status, &created, &closed)
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, ErrNotFound
	}
	if err != nil {
		return Order{}, err
	}
	if createdT, err = time.Parse(timeLayout, created); err != nil {
		return Order{}, fmt.Errorf("order %s: created_at: %w", id, err)
	}
	o.CreatedAt = createdT
	if closed.Valid {
		if closedT, err = time.Parse(timeLayout, closed.String); err != nil {
			return Order{}, fmt.Errorf("order %s: closed_at: %w", id, err)
		}
		o.ClosedAt = &closedT
	}
	return o, nil
}

// PayOrder marks an open order paid; paying a paid order again is a no-op. A closed order
// cannot be paid (ErrClosed). It only touches the database: cancelling the timer is the
// caller's next step, after the commit.
func (s *Service) PayOrder(ctx context.Context, id string) (Order, error) {
	var o Order
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var err error
		if o, err = getOrder(ctx, tx, id); err != nil {
			return err
		}
		switch o.Status {
		case StatusClosed:
			return ErrClosed
		case StatusPaid:
			return nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE orders SET status = ? WHERE id = ? AND status = ?`,
			StatusPaid, id, StatusOpen); err != nil {
			return err
		}
		o.Status = StatusPaid
		return nil
	})
	return o, err
}

// cancelTimer asks courier to cancel the order's timer. It never fails the payment: the order
// is already paid in the database, and a timer that fires anyway finds it paid and is ignored.
func (s *Service) cancelTimer(ctx context.Context, id string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	log := s.logger().With("order_id", id, "biz_type", s.BizType)
	resp, err := s.Courier.CancelTimer(ctx, s.BizType, id)
	switch {
	case err != nil:
		log.Error("cancelling the close-order timer failed; the order stays paid and a late callback is ignored", "err", err)
		return CancelFailed
	case resp.OK():
		log.Info("close-order timer cancelled")
		return CancelDone
	case resp.Status == http.StatusConflict:
		log.Info("close-order timer already fired or was cancelled; the callback ignores paid orders", "courier", resp.Message())
		return CancelTooLate
	case resp.Status == http.StatusNotFound:
		log.Warn("courier has no close-order timer yet (the relay has not armed it); when it fires, the callback ignores the paid order",
			"courier", resp.Message())
		return CancelNotArmed
	default:
		log.Error("courier refused to cancel the close-order timer; the order stays paid and a late callback is ignored",
			"status", resp.Status, "courier", resp.Message())
		return CancelFailed
	}
}

// ExtendRequest is the body of POST /orders/{id}/extend: delay ("10m") or fire_at (RFC 3339).
type ExtendRequest struct {
	Delay  string     `json:"delay"`
	FireAt *time.Time `json:"fire_at"`
}

func (r ExtendRequest) validate(now time.Time) (api.Reschedule, error) {
	switch {
	case r.Delay != "" && r.FireAt != nil:
		return api.Reschedule{}, errBadTiming
	case r.Delay != "":
		d, err := time.ParseDuration(r.Delay)
		if err != nil || d <= 0 {
			return api.Reschedule{}, errBadTiming
		}
		return api.Reschedule{When: api.After(d)}, nil
	case r.FireAt != nil:
		if !r.FireAt.After(now) {
			return api.Reschedule{}, errBadTiming
		}
		return api.Reschedule{When: api.At(*r.FireAt)}, nil
	}
	return api.Reschedule{}, errBadTiming
}

func (s *Service) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Item string `json:"item"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	req.Item = strings.TrimSpace(req.Item)
	switch {
	case req.Item == "":
		writeError(w, http.StatusBadRequest, "item is required")
		return
	case len(req.Item) > 200:
		writeError(w, http.StatusBadRequest, "item is longer than 200 bytes")
		return
	}
	o, t, err := s.CreateOrder(r.Context(), req.Item)
	if err != nil {
		s.logger().Error("create order failed", "item", req.Item, "err", err)
		writeError(w, http.StatusInternalServerError, "creating the order failed")
		return
	}
	s.logger().Info("order created; close-order timer armed through the outbox",
		"order_id", o.ID, "fire_at", t.FireAt, "workflow_id", t.WorkflowID)
	writeJSON(w, http.StatusCreated, OrderResponse{Order: o, Timer: t})
}

func (s *Service) handleGet(w http.ResponseWriter, r *http.Request) {
	o, err := s.GetOrder(r.Context(), r.PathValue("id"))
	if !s.orderErr(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, OrderResponse{Order: o})
}

func (s *Service) handlePay(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	o, err := s.PayOrder(r.Context(), id)
	if !s.orderErr(w, err) {
		return
	}
	s.logger().Info("order paid", "order_id", id)
	// Paid in the database first; the cancel is best effort (and repeated by paying again).
	writeJSON(w, http.StatusOK, OrderResponse{Order: o, TimerCancel: s.cancelTimer(r.Context(), id)})
}

func (s *Service) handleExtend(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req ExtendRequest
	if !decodeBody(w, r, &req) {
		return
	}
	patch, err := req.validate(s.now())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	o, err := s.GetOrder(r.Context(), id)
	if !s.orderErr(w, err) {
		return
	}
	if o.Status != StatusOpen {
		writeError(w, http.StatusConflict, fmt.Sprintf("order is %s: there is no close-order timer to extend", o.Status))
		return
	}
	resp, err := s.Courier.RescheduleTimer(r.Context(), s.BizType, id, patch)
	switch {
	case err != nil:
		s.logger().Error("extend: courier unreachable", "order_id", id, "err", err)
		writeError(w, http.StatusBadGateway, "courier is unreachable: the timer was not changed")
		return
	case resp.OK():
		s.logger().Info("close-order timer rescheduled", "order_id", id, "delay", req.Delay, "fire_at", req.FireAt)
		writeJSON(w, http.StatusOK, OrderResponse{Order: o, Timer: json.RawMessage(resp.Body)})
		return
	case resp.Status == http.StatusUnauthorized || resp.Status == http.StatusForbidden:
		s.logger().Error("extend: courier refused the API key", "order_id", id, "status", resp.Status, "courier", resp.Message())
		writeError(w, http.StatusBadGateway, "courier refused this service's API key")
		return
	case resp.Status >= 400 && resp.Status < 500:
		// 409: the timer already fired (the order is being closed) or was cancelled.
		writeError(w, resp.Status, "courier: "+resp.Message())
		return
	default:
		s.logger().Error("extend: courier failed", "order_id", id, "status", resp.Status, "courier", resp.Message())
		writeError(w, http.StatusBadGateway, "courier failed: "+resp.Message())
	}
}

// orderErr writes the answer for an order lookup error and reports whether there was none.
func (s *Service) orderErr(w http.ResponseWriter, err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, ErrNotFound.Error())
	case errors.Is(err, ErrClosed):
		writeError(w, http.StatusConflict, "order is closed: it timed out before it was paid")
	default:
		s.logger().Error("orders: database error", "err", err)
		writeError(w, http.StatusInternalServerError, "internal error")
	}
	return false
}

// decodeBody reads one JSON value into v, or answers 400 and returns false.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "invalid JSON body: more than one value")
		return false
	}
	return true
}

func newOrderID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "o-" + hex.EncodeToString(b), nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
