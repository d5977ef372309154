package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/outbox"
)

// outboxCursor is what an outbox page token carries: where the next page starts and the query
// it belongs to, so a token is never applied to another query.
type outboxCursor struct {
	V      int    `json:"v"`
	After  int64  `json:"after"`
	Source string `json:"source"`
	Status string `json:"status"`
	Topic  string `json:"topic"`
}

func (cur outboxCursor) token() string {
	b, _ := json.Marshal(cur)
	return base64.RawURLEncoding.EncodeToString(b)
}

// parseOutboxCursor reads a page token made by token(); anything else, or a token of another
// query, is invalid_argument.
func parseOutboxCursor(raw string, want outboxCursor) (outboxCursor, error) {
	bad := &courier.Error{Code: courier.CodeInvalid, Message: "page_token is not a token this list returned for this query",
		Details: map[string]any{"field": "page_token"}}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil || len(b) > 1024 {
		return outboxCursor{}, bad
	}
	var cur outboxCursor
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if dec.Decode(&cur) != nil || dec.More() || cur.V != 1 || cur.After < 0 {
		return outboxCursor{}, bad
	}
	if cur.Source != want.Source || cur.Status != want.Status || cur.Topic != want.Topic {
		return outboxCursor{}, bad
	}
	return cur, nil
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
	if !courier.ValidName(name) {
		return "", nil, courier.CheckName("source", name)
	}
	return "", nil, courier.Errorf(courier.CodeNotFound, "unknown outbox source %q", name)
}

// record names the outbox record of the request's path: the source (?source=), its store and
// the id.
func (h *handlers) record(c echo.Context) (string, OutboxStore, int64, error) {
	id, err := pathInt(c, "id")
	if err != nil {
		return "", nil, 0, err
	}
	src, st, err := h.source(c)
	return src, st, id, err
}

// listOutbox pages through records in ascending id order: at most limit (default 100, at most
// 1000) per page, without payloads unless include_payload=true, and then no more payload bytes
// than the store's budget per page.
func (h *handlers) listOutbox(c echo.Context) error { return answerPage(c, h.outboxPage) }

// outboxPage reads the page of records the request's query asks for (source, status, topic,
// limit, include_payload, page_token): the API's list and the console's.
func (h *handlers) outboxPage(c echo.Context) (api.OutboxPage, error) {
	src, st, err := h.source(c)
	if err != nil {
		return api.OutboxPage{}, err
	}
	f := courier.OutboxFilter{Status: courier.OutboxStatus(c.QueryParam("status")), Topic: c.QueryParam("topic")}
	if f.Status != "" && !f.Status.Valid() {
		return api.OutboxPage{}, &courier.Error{Code: courier.CodeInvalid, Message: fmt.Sprintf("status must be one of pending, dispatched, sent, dead; got %q", f.Status),
			Details: map[string]any{"field": "status"}}
	}
	if f.Topic != "" {
		if err := courier.CheckTopic("topic", f.Topic); err != nil {
			return api.OutboxPage{}, err
		}
	}
	if f.Limit, err = queryLimit(c); err != nil {
		return api.OutboxPage{}, err
	}
	if f.WithPayload, err = queryBool(c, "include_payload"); err != nil {
		return api.OutboxPage{}, err
	}
	want := outboxCursor{V: 1, Source: src, Status: string(f.Status), Topic: f.Topic}
	if raw := c.QueryParam("page_token"); raw != "" {
		cur, err := parseOutboxCursor(raw, want)
		if err != nil {
			return api.OutboxPage{}, err
		}
		f.AfterID = cur.After
	}
	recs, more, err := st.ListOutbox(c.Request().Context(), f)
	if err != nil {
		return api.OutboxPage{}, err
	}
	page := api.OutboxPage{Items: make([]api.OutboxRecord, 0, len(recs))}
	for _, r := range recs {
		page.Items = append(page.Items, api.OutboxRecordOf(src, r))
	}
	if more && len(recs) > 0 {
		want.After = recs[len(recs)-1].ID
		page.NextPageToken = want.token()
	}
	return page, nil
}

// publishOutbox writes one outbox record for producers that cannot write to a database of their
// own; it is delivered like any other row. With an Idempotency-Key the request is safe to
// retry: a repeat answers the record the first one wrote (200, existing) and publishes nothing
// more, and a repeat with another body is a conflict.
func (h *handlers) publishOutbox(c echo.Context) error {
	key, err := idempotencyKey(c)
	if err != nil {
		return err
	}
	var req api.PublishRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if len(req.Payload) == 0 {
		return &courier.Error{Code: courier.CodeValidation, Message: "payload is required (any JSON value)",
			Details: map[string]any{"field": "payload"}}
	}
	m := outbox.Message{Topic: req.Topic, Key: req.Key, Payload: req.Payload, Headers: req.Headers}
	if err := m.Validate(); err != nil {
		return err
	}
	var (
		rec     courier.OutboxRecord
		created = true
	)
	if key == "" {
		rec, err = h.d.Outbox.EnqueueOutbox(c.Request().Context(), m)
	} else {
		rec, created, err = h.d.Outbox.EnqueueOutboxOnce(c.Request().Context(), m, key, publishHash(m))
	}
	if err != nil {
		return err
	}
	out := api.OutboxRecordOf(courier.DefaultSource, rec)
	if !created {
		out.Outcome = api.OutboxExisting
		return c.JSON(http.StatusOK, out)
	}
	if h.d.Wake != nil {
		h.d.Wake()
	}
	out.Outcome = api.OutboxCreated
	return c.JSON(http.StatusCreated, out)
}

// idempotencyKey reads a request's Idempotency-Key: empty when none was sent, otherwise 1 to
// api.MaxIdempotencyKeyBytes of printable ASCII.
func idempotencyKey(c echo.Context) (string, error) {
	vals := c.Request().Header.Values(api.IdempotencyKeyHeader)
	if len(vals) == 0 {
		return "", nil
	}
	bad := func(msg string) error {
		return &courier.Error{Code: courier.CodeValidation, Message: msg, Details: map[string]any{"header": api.IdempotencyKeyHeader}}
	}
	if len(vals) > 1 {
		return "", bad("send one Idempotency-Key")
	}
	k := vals[0]
	if k == "" || len(k) > api.MaxIdempotencyKeyBytes {
		return "", bad(fmt.Sprintf("Idempotency-Key must be 1 to %d characters", api.MaxIdempotencyKeyBytes))
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return "", bad("Idempotency-Key must be printable ASCII without spaces (a UUID, say)")
		}
	}
	return k, nil
}

// publishHash is what a repeat of a publish must match to be the same request: its topic, key,
// payload (compacted) and headers.
func publishHash(m outbox.Message) string {
	var payload bytes.Buffer
	if err := json.Compact(&payload, m.Payload); err != nil {
		payload.Reset()
		payload.Write(m.Payload)
	}
	b, _ := json.Marshal(struct {
		Topic   string            `json:"topic"`
		Key     string            `json:"key"`
		Payload json.RawMessage   `json:"payload"`
		Headers map[string]string `json:"headers"`
	}{m.Topic, m.Key, payload.Bytes(), m.Headers})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (h *handlers) getOutbox(c echo.Context) error {
	src, st, id, err := h.record(c)
	if err != nil {
		return err
	}
	rec, err := st.GetOutbox(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.OutboxRecordOf(src, rec))
}

func (h *handlers) redriveOutbox(c echo.Context) error {
	src, st, id, err := h.record(c)
	if err != nil {
		return err
	}
	rec, err := h.redriveRecord(c.Request().Context(), src, st, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, api.OutboxRecordOf(src, rec))
}

// redriveRecord makes one record of source src pending again once its last delivery run has
// closed: the API's redrive and the console's.
func (h *handlers) redriveRecord(ctx context.Context, src string, st OutboxStore, id int64) (courier.OutboxRecord, error) {
	if h.d.Runs != nil {
		rec, err := st.GetOutbox(ctx, id)
		if err != nil {
			return courier.OutboxRecord{}, err
		}
		if rec.Status == courier.OutboxDead {
			if err := h.d.Runs.WaitClosed(ctx, courier.OutboxWorkflowID(src, id)); err != nil {
				return courier.OutboxRecord{}, err
			}
		}
	}
	rec, err := st.RedriveOutbox(ctx, id)
	if err != nil {
		return courier.OutboxRecord{}, err
	}
	if h.d.Wake != nil {
		h.d.Wake()
	}
	return rec, nil
}

// Bulk redrive bounds.
const (
	defaultRedriveMax = 1000
	maxRedriveMax     = 10000
	redriveBatch      = 500 // records per statement
	runCheckParallel  = 8   // delivery runs checked at once
	runCheckWait      = 200 * time.Millisecond
)

// redriveDeadOutbox redrives the dead records a filter matches, in batches of at most 500 (one
// UPDATE each, payloads never read). A record whose last delivery run is still open is skipped
// and counted busy rather than waited for: a bulk call must not spend seconds per record.
func (h *handlers) redriveDeadOutbox(c echo.Context) error {
	var req api.RedriveFilter
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	res, err := h.redriveDead(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// redriveDead checks a bulk redrive's filter and redrives what it matches: the API's bulk
// redrive and the console's.
func (h *handlers) redriveDead(ctx context.Context, req api.RedriveFilter) (api.RedriveResult, error) {
	src, st := courier.DefaultSource, h.d.Outbox
	if req.Source != "" && req.Source != courier.DefaultSource {
		var ok bool
		if st, ok = h.d.Sources[req.Source]; !ok {
			if err := courier.CheckName("source", req.Source); err != nil {
				return api.RedriveResult{}, err
			}
			return api.RedriveResult{}, &courier.Error{Code: courier.CodeNotFound, Message: fmt.Sprintf("unknown outbox source %q", req.Source),
				Details: map[string]any{"field": "source"}}
		}
		src = req.Source
	}
	f := courier.DeadFilter{Topic: req.Topic}
	if f.Topic != "" {
		if err := courier.CheckTopicPattern("topic", f.Topic); err != nil {
			return api.RedriveResult{}, err
		}
	}
	if req.DeadAfter != nil {
		f.DeadSince = *req.DeadAfter
	}
	if req.DeadBefore != nil {
		f.DeadBefore = *req.DeadBefore
	}
	if !f.DeadSince.IsZero() && !f.DeadBefore.IsZero() && !f.DeadSince.Before(f.DeadBefore) {
		return api.RedriveResult{}, &courier.Error{Code: courier.CodeValidation, Message: "dead_after must be before dead_before",
			Details: map[string]any{"field": "dead_after"}}
	}
	left := defaultRedriveMax
	if req.Max != nil {
		left = *req.Max
		if left < 1 || left > maxRedriveMax {
			return api.RedriveResult{}, &courier.Error{Code: courier.CodeValidation, Message: fmt.Sprintf("max must be 1 to %d; got %d", maxRedriveMax, left),
				Details: map[string]any{"field": "max"}}
		}
	}
	var done, busy int
	var more bool
	for left > 0 {
		refs, err := st.DeadOutbox(ctx, f, min(left, redriveBatch))
		if err != nil {
			return api.RedriveResult{}, err
		}
		if len(refs) == 0 {
			break
		}
		f.AfterID = refs[len(refs)-1].ID
		left -= len(refs)
		ids, err := h.closedRuns(ctx, src, refs)
		if err != nil {
			return api.RedriveResult{}, err
		}
		busy += len(refs) - len(ids)
		n, err := st.RedriveDeadOutbox(ctx, ids)
		if err != nil {
			return api.RedriveResult{}, err
		}
		done += int(n)
		if left == 0 {
			rest, err := st.DeadOutbox(ctx, f, 1)
			if err != nil {
				return api.RedriveResult{}, err
			}
			more = len(rest) > 0
		}
	}
	if done > 0 && h.d.Wake != nil {
		h.d.Wake()
	}
	return api.NewRedriveResult(done, busy, more), nil
}

// closedRuns returns the ids of refs whose last delivery run is closed (all of them without
// Deps.Runs). A run that does not close within a moment is left out: busy.
func (h *handlers) closedRuns(ctx context.Context, src string, refs []courier.DeadRef) ([]int64, error) {
	if h.d.Runs == nil {
		ids := make([]int64, len(refs))
		for i, r := range refs {
			ids[i] = r.ID
		}
		return ids, nil
	}
	closed := make([]bool, len(refs))
	errs := make([]error, len(refs))
	sem := make(chan struct{}, runCheckParallel)
	var wg sync.WaitGroup
	for i, r := range refs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			cctx, cancel := context.WithTimeout(ctx, runCheckWait)
			defer cancel()
			err := h.d.Runs.WaitClosed(cctx, courier.OutboxWorkflowID(src, r.ID))
			switch {
			case err == nil:
				closed[i] = true
			case ctx.Err() != nil:
				errs[i] = ctx.Err()
			case errors.Is(err, context.DeadlineExceeded) || courier.ErrorCode(err) == courier.CodeConflict:
				// still open: busy
			default:
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err // the first: the others are most likely the same cause
		}
	}
	var ids []int64
	for i, r := range refs {
		if closed[i] {
			ids = append(ids, r.ID)
		}
	}
	return ids, nil
}
