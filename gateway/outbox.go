package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/store"
)

// OutboxJSON is an outbox record as the API shows it. Payload is the raw bytes, base64-encoded.
type OutboxJSON struct {
	Source        string            `json:"source"`
	ID            int64             `json:"id"`
	Topic         string            `json:"topic"`
	Key           string            `json:"key,omitempty"`
	Payload       []byte            `json:"payload"`
	Headers       map[string]string `json:"headers,omitempty"`
	Status        string            `json:"status"`
	Attempts      int               `json:"attempts"`
	NextAttemptAt time.Time         `json:"next_attempt_at"`
	CreatedAt     time.Time         `json:"created_at"`
	SentAt        *time.Time        `json:"sent_at,omitempty"`
	LastError     string            `json:"last_error,omitempty"`
	WorkflowID    string            `json:"workflow_id"`
}

func outboxJSON(source string, r courier.OutboxRecord) OutboxJSON {
	return OutboxJSON{
		Source: source, ID: r.ID, Topic: r.Topic, Key: r.Key, Payload: r.Payload, Headers: r.Headers,
		Status: string(r.Status), Attempts: r.Attempts, NextAttemptAt: r.NextAttemptAt,
		CreatedAt: r.CreatedAt, SentAt: r.SentAt, LastError: r.LastError,
		WorkflowID: courier.OutboxWorkflowID(source, r.ID),
	}
}

// OutboxPage is a page of records; pass NextAfter as ?after= for the next page.
type OutboxPage struct {
	Items     []OutboxJSON `json:"items"`
	NextAfter int64        `json:"next_after,omitempty"`
}

func pathID(c echo.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, courier.Errorf(courier.CodeInvalid, "outbox id must be a positive integer, got %q", c.Param("id"))
	}
	return id, nil
}

// source picks the database named by ?source= (default: courier's own).
func (h *handlers) source(c echo.Context) (string, OutboxStore, error) {
	name := c.QueryParam("source")
	if name == "" || name == courier.DefaultSource {
		return courier.DefaultSource, h.d.Outbox, nil
	}
	if st, ok := h.d.Sources[name]; ok {
		return name, st, nil
	}
	return "", nil, courier.Errorf(courier.CodeNotFound, "unknown outbox source %q", name)
}

func (h *handlers) listOutbox(c echo.Context) error {
	src, st, err := h.source(c)
	if err != nil {
		return err
	}
	f := store.OutboxFilter{Status: courier.OutboxStatus(c.QueryParam("status")), Topic: c.QueryParam("topic")}
	if f.Status != "" && !f.Status.Valid() {
		return courier.Errorf(courier.CodeInvalid, "status must be one of pending, dispatched, sent, dead; got %q", f.Status)
	}
	if s := c.QueryParam("after"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return courier.Errorf(courier.CodeInvalid, "after must be a non-negative integer")
		}
		f.AfterID = v
	}
	if s := c.QueryParam("limit"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > 1000 {
			return courier.Errorf(courier.CodeInvalid, "limit must be an integer from 1 to 1000")
		}
		f.Limit = v
	}
	recs, err := st.ListOutbox(c.Request().Context(), f)
	if err != nil {
		return err
	}
	page := OutboxPage{Items: make([]OutboxJSON, 0, len(recs))}
	for _, r := range recs {
		page.Items = append(page.Items, outboxJSON(src, r))
	}
	limit := f.Limit
	if limit == 0 {
		limit = 100
	}
	if len(recs) == limit {
		page.NextAfter = recs[len(recs)-1].ID
	}
	return c.JSON(http.StatusOK, page)
}

// PublishRequest is the body of POST /v1/outbox.
type PublishRequest struct {
	Topic   string            `json:"topic"`
	Key     string            `json:"key"`
	Payload json.RawMessage   `json:"payload"`
	Headers map[string]string `json:"headers"`
}

// publishOutbox writes one outbox record for producers that cannot write to a database of their
// own; it is delivered like any other row.
func (h *handlers) publishOutbox(c echo.Context) error {
	var req PublishRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if len(req.Payload) == 0 {
		return &courier.Error{Code: courier.CodeValidation, Message: "payload is required (any JSON value)",
			Details: map[string]any{"field": "payload"}}
	}
	m := outbox.Message{Topic: req.Topic, Key: req.Key, Payload: req.Payload, Headers: req.Headers}
	if err := m.Validate(); err != nil {
		return &courier.Error{Code: courier.CodeValidation, Message: err.Error()}
	}
	rec, err := h.d.Outbox.EnqueueOutbox(c.Request().Context(), m)
	if err != nil {
		return err
	}
	if h.d.Wake != nil {
		h.d.Wake()
	}
	return c.JSON(http.StatusCreated, outboxJSON(courier.DefaultSource, rec))
}

func (h *handlers) getOutbox(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	src, st, err := h.source(c)
	if err != nil {
		return err
	}
	rec, err := st.GetOutbox(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, outboxJSON(src, rec))
}

func (h *handlers) redriveOutbox(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	src, st, err := h.source(c)
	if err != nil {
		return err
	}
	rec, err := st.RedriveOutbox(c.Request().Context(), id)
	if err != nil {
		return err
	}
	if h.d.Wake != nil {
		h.d.Wake()
	}
	return c.JSON(http.StatusAccepted, outboxJSON(src, rec))
}
