package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/courier-oss/courier/store"
)

// openSQLite opens a fresh SQLite file in t.TempDir() through courier's store.
func openSQLite(t *testing.T, name string) *bun.DB {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), name))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st.DB()
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newAccountServer(t *testing.T) (*httptest.Server, *bun.DB) {
	t.Helper()
	db := openSQLite(t, "registration.db")
	require.NoError(t, SetupAccount(context.Background(), db))
	require.NoError(t, SetupAccount(context.Background(), db), "setup must be idempotent")
	srv := httptest.NewServer((&Account{DB: db, Log: quietLogger()}).Handler())
	t.Cleanup(srv.Close)
	return srv, db
}

// client bounds every request, so a handler that blocks (say, on a database lock) fails the
// test quickly instead of hanging it.
var client = &http.Client{Timeout: 5 * time.Second}

func post(t *testing.T, srv *httptest.Server, body string) (int, map[string]any) {
	t.Helper()
	resp, err := client.Post(srv.URL+"/register", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

func count(t *testing.T, db *bun.DB, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(context.Background(), query, args...).Scan(&n))
	return n
}

type outboxRow struct {
	ID      int64
	Topic   string
	Key     string
	Payload []byte
	Status  string
}

func outboxRows(t *testing.T, db *bun.DB) []outboxRow {
	t.Helper()
	rows, err := db.QueryContext(context.Background(),
		`SELECT id, topic, "key", payload, status FROM courier_outbox ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var r outboxRow
		require.NoError(t, rows.Scan(&r.ID, &r.Topic, &r.Key, &r.Payload, &r.Status))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestRegisterWritesUserAndOutboxRowInOneTransaction(t *testing.T) {
	srv, db := newAccountServer(t)

	status, body := post(t, srv, `{"email":" Ada@Example.com ","name":"Ada"}`)
	require.Equal(t, http.StatusCreated, status, body)
	require.Equal(t, "ada@example.com", body["email"], "email is trimmed and lower-cased")
	require.Equal(t, "Ada", body["name"])
	userID := int64(body["id"].(float64))
	require.Positive(t, userID)

	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM users`))
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM users WHERE id = ? AND email = ?`, userID, "ada@example.com"))
	rows := outboxRows(t, db)
	require.Len(t, rows, 2, "one row per reward topic")
	ids := body["outbox_ids"].(map[string]any)
	for i, topic := range []string{TopicCoupons, TopicPoints} {
		row := rows[i]
		require.Equal(t, int64(ids[topic].(float64)), row.ID, "the response names the outbox rows by topic")
		require.Equal(t, topic, row.Topic)
		require.Equal(t, strconv.FormatInt(userID, 10), row.Key, "key is the user id")
		require.EqualValues(t, "pending", row.Status)
		var ev UserRegistered
		require.NoError(t, json.Unmarshal(row.Payload, &ev))
		require.Equal(t, userID, ev.UserID)
		require.Equal(t, "ada@example.com", ev.Email)
		require.False(t, ev.RegisteredAt.IsZero(), "payload carries registered_at")
		require.Contains(t, string(row.Payload), `"email":"ada@example.com"`)
	}

	// The same email again (different case): 409, and neither a user nor an outbox row.
	status, body = post(t, srv, `{"email":"ADA@example.com","name":"Ada again"}`)
	require.Equal(t, http.StatusConflict, status)
	require.NotEmpty(t, body["error"])
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM users`))
	require.Len(t, outboxRows(t, db), 2, "a rejected registration must not leave an event behind")

	// A different user gets its own row with its own key.
	status, body = post(t, srv, `{"email":"grace@example.com","name":"Grace"}`)
	require.Equal(t, http.StatusCreated, status, body)
	rows = outboxRows(t, db)
	require.Len(t, rows, 4)
	require.Equal(t, strconv.FormatInt(int64(body["id"].(float64)), 10), rows[2].Key)
	require.Equal(t, rows[2].Key, rows[3].Key)
	require.NotEqual(t, rows[0].Key, rows[2].Key)
}

func TestRegisterRejectsBadRequestsWithoutWriting(t *testing.T) {
	srv, db := newAccountServer(t)
	for name, body := range map[string]string{
		"not json":        `{"email":`,
		"wrong type":      `{"email": 42}`,
		"missing email":   `{"name":"Ada"}`,
		"blank email":     `{"email":"   ","name":"Ada"}`,
		"not an address":  `{"email":"ada","name":"Ada"}`,
		"two json values": `{"email":"a@example.com"}{"email":"b@example.com"}`,
	} {
		status, out := post(t, srv, body)
		require.Equal(t, http.StatusBadRequest, status, name)
		require.NotEmpty(t, out["error"], name)
	}
	require.Equal(t, 0, count(t, db, `SELECT count(*) FROM users`))
	require.Empty(t, outboxRows(t, db))

	resp, err := client.Get(srv.URL + "/register")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

// If the outbox insert fails, the user insert is rolled back with it: no user without event.
func TestRegisterRollsBackUserWhenOutboxInsertFails(t *testing.T) {
	srv, db := newAccountServer(t)
	_, err := db.ExecContext(context.Background(), `ALTER TABLE courier_outbox RENAME TO courier_outbox_gone`)
	require.NoError(t, err)

	status, out := post(t, srv, `{"email":"ada@example.com","name":"Ada"}`)
	require.Equal(t, http.StatusInternalServerError, status, out)
	require.Equal(t, 0, count(t, db, `SELECT count(*) FROM users`))
}
