package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/webhook"
)

// Outcomes of a close-order callback, recorded in processed_deliveries.
const (
	OutcomeClosed        = "closed"                 // the order was open: now closed
	OutcomeIgnoredPaid   = "ignored_paid"           // paid before the timer fired
	OutcomeAlreadyClosed = "ignored_already_closed" // closed by an earlier delivery
	OutcomeUnknownOrder  = "ignored_unknown_order"  // no such order here
)

// CallbackResult is the 2xx body of a callback.
type CallbackResult struct {
	DeliveryID string `json:"delivery_id"`
	OrderID    string `json:"order_id"`
	Outcome    string `json:"outcome"`
	Duplicate  bool   `json:"duplicate,omitempty"` // this delivery id was processed before
}

// maxCallbackBytes bounds a callback body (webhook.Verifier.Middleware's default).
const maxCallbackBytes = 1 << 20

// verifyCallbacks checks each callback's signature with v before next sees it, like
// webhook.Verifier.Middleware: 401 for a missing, bad or stale (±5 min) signature, the body
// restored for next. The one difference: a webhook-id the verifier already accepted (a
// replay) is passed on instead of refused.
//
// Courier signs every attempt of one firing with the same webhook-id (= delivery_id). With the
// stock middleware, an attempt that got a 5xx (say, the database was busy) or whose 2xx was
// lost to a timeout is retried by courier, the retry is refused as a replay with 401, and 401
// is a permanent failure: the order would never close. Verify only reports ErrReplay for a
// request whose signature and timestamp are valid, and the handler is idempotent on
// delivery_id, so letting an authentic replay through is safe: it changes nothing twice.
func verifyCallbacks(v *webhook.Verifier, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCallbackBytes))
		if err != nil {
			http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
			return
		}
		if err := v.Verify(body, r.Header); err != nil && !errors.Is(err, webhook.ErrReplay) {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// handleCallback is POST /callbacks/order-close, behind verifyCallbacks. Any authentic
// callback it can act on answers 2xx, also for a paid or unknown order: there is nothing a
// retry could change. Only a database failure answers 500, which courier retries.
func (s *Service) handleCallback(w http.ResponseWriter, r *http.Request) {
	var cb api.TimerCallback
	if err := json.NewDecoder(r.Body).Decode(&cb); err != nil {
		writeError(w, http.StatusBadRequest, "invalid callback body: "+err.Error())
		return
	}
	if cb.DeliveryID == "" {
		cb.DeliveryID = r.Header.Get(webhook.HeaderID)
	}
	if cb.DeliveryID == "" || cb.BizID == "" {
		writeError(w, http.StatusBadRequest, "callback without delivery_id or biz_id")
		return
	}
	log := s.logger().With("delivery_id", cb.DeliveryID, "order_id", cb.BizID, "attempt", cb.Attempt)
	if cb.BizType != s.BizType {
		log.Warn("callback of another business type ignored", "biz_type", cb.BizType, "want", s.BizType)
		writeJSON(w, http.StatusOK, CallbackResult{DeliveryID: cb.DeliveryID, OrderID: cb.BizID, Outcome: "ignored_other_biz_type"})
		return
	}
	res, err := s.CloseOnTimeout(r.Context(), cb.DeliveryID, cb.BizID)
	if err != nil {
		log.Error("close-order callback failed; courier will retry", "err", err)
		writeError(w, http.StatusInternalServerError, "internal error")
		return
	}
	if res.Duplicate {
		log.Info("duplicate close-order delivery: nothing changed", "first_outcome", res.Outcome)
	} else {
		log.Info("close-order timer fired", "outcome", res.Outcome, "fire_at", cb.FireAt)
	}
	writeJSON(w, http.StatusOK, res)
}

// CloseOnTimeout handles one fired close-order timer, in one transaction: it records the
// delivery id in processed_deliveries (a second copy finds it there and changes nothing) and
// closes the order only if it is still open. A paid order stays paid.
func (s *Service) CloseOnTimeout(ctx context.Context, deliveryID, orderID string) (CallbackResult, error) {
	res := CallbackResult{DeliveryID: deliveryID, OrderID: orderID}
	now := s.now().Format(timeLayout)
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		ins, err := tx.ExecContext(ctx,
			`INSERT INTO processed_deliveries (delivery_id, order_id, outcome, processed_at) VALUES (?, ?, '', ?)
			 ON CONFLICT (delivery_id) DO NOTHING`, deliveryID, orderID, now)
		if err != nil {
			return fmt.Errorf("record delivery: %w", err)
		}
		if n, err := ins.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			res.Duplicate = true
			return tx.QueryRowContext(ctx, `SELECT order_id, outcome FROM processed_deliveries WHERE delivery_id = ?`,
				deliveryID).Scan(&res.OrderID, &res.Outcome)
		}
		upd, err := tx.ExecContext(ctx,
			`UPDATE orders SET status = ?, closed_at = ? WHERE id = ? AND status = ?`,
			StatusClosed, now, orderID, StatusOpen)
		if err != nil {
			return fmt.Errorf("close order: %w", err)
		}
		n, err := upd.RowsAffected()
		if err != nil {
			return err
		}
		if n == 1 {
			res.Outcome = OutcomeClosed
		} else {
			o, err := getOrder(ctx, tx, orderID)
			switch {
			case errors.Is(err, ErrNotFound):
				res.Outcome = OutcomeUnknownOrder
			case err != nil:
				return err
			case o.Status == StatusPaid:
				res.Outcome = OutcomeIgnoredPaid
			default:
				res.Outcome = OutcomeAlreadyClosed
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE processed_deliveries SET outcome = ? WHERE delivery_id = ?`, res.Outcome, deliveryID)
		return err
	})
	if err != nil {
		return CallbackResult{}, err
	}
	return res, nil
}
