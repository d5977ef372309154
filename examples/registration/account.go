package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"

	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/schema"
)

// The outbox topics of a registration: one record per reward, so that courier can route each
// to the cluster its consumer reads (COURIER_ROUTES="points.>=points,coupons.>=coupons": points
// on RabbitMQ, coupons on NATS) and one cluster being down never holds up the other reward.
const (
	TopicCoupons = "coupons.user.registered"
	TopicPoints  = "points.user.registered"
)

// RegistrationTopics are the topics every registration writes a record to, in this order.
var RegistrationTopics = []string{TopicCoupons, TopicPoints}

// UserRegistered is the payload of a registration's messages.
type UserRegistered struct {
	UserID       int64     `json:"user_id"`
	Email        string    `json:"email"`
	RegisteredAt time.Time `json:"registered_at"`
}

// User is a row of the users table.
type User struct {
	ID           int64     `json:"id"`
	Email        string    `json:"email"`
	Name         string    `json:"name"`
	RegisteredAt time.Time `json:"registered_at"`
}

// usersDDL creates the account service's own table, per dialect.
var usersDDL = map[dialect.Name]string{
	dialect.SQLite: `CREATE TABLE IF NOT EXISTS users (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    email         TEXT NOT NULL UNIQUE,
    name          TEXT NOT NULL DEFAULT '',
    registered_at TEXT NOT NULL
)`,
	dialect.PG: `CREATE TABLE IF NOT EXISTS users (
    id            BIGSERIAL PRIMARY KEY,
    email         TEXT NOT NULL UNIQUE,
    name          TEXT NOT NULL DEFAULT '',
    registered_at TIMESTAMPTZ NOT NULL
)`,
}

// SetupAccount installs courier's outbox table and the users table in the account service's
// database. Both steps are idempotent, so it runs on every start.
func SetupAccount(ctx context.Context, db *bun.DB) error {
	if err := schema.Up(ctx, db, schema.Outbox); err != nil {
		return fmt.Errorf("account: install outbox table: %w", err)
	}
	ddl, ok := usersDDL[db.Dialect().Name()]
	if !ok {
		return fmt.Errorf("account: unsupported dialect %s", db.Dialect().Name())
	}
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("account: create users table: %w", err)
	}
	return nil
}

// Account is the account service: a producer that writes users and their registration events
// to its own database, atomically.
type Account struct {
	DB  *bun.DB
	Log *slog.Logger
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// RegisterRequest is the body of POST /register.
type RegisterRequest struct {
	Email string `json:"email"`
	Name  string `json:"name"`
}

// RegisterResponse is the 201 body of POST /register: the user plus the ids of the outbox rows
// that carry its events, by topic (courier delivers each as workflow outbox/<source>/<id>).
type RegisterResponse struct {
	User
	OutboxIDs map[string]int64 `json:"outbox_ids"`
}

// ErrEmailTaken reports a registration for an email that already has a user.
var ErrEmailTaken = errors.New("email is already registered")

const maxRequestBytes = 64 << 10

// Handler returns the service's HTTP routes: POST /register and GET /healthz.
func (a *Account) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /register", a.handleRegister)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := a.DB.PingContext(r.Context()); err != nil {
			writeError(w, http.StatusServiceUnavailable, "database unavailable")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return mux
}

func (a *Account) handleRegister(w http.ResponseWriter, r *http.Request) {
	var req RegisterRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "invalid JSON body: more than one value")
		return
	}
	req.Email = strings.ToLower(strings.TrimSpace(req.Email))
	req.Name = strings.TrimSpace(req.Name)
	switch {
	case req.Email == "":
		writeError(w, http.StatusBadRequest, "email is required")
		return
	case len(req.Email) > 254 || !strings.Contains(req.Email, "@"):
		writeError(w, http.StatusBadRequest, "email is not a valid address")
		return
	case len(req.Name) > 200:
		writeError(w, http.StatusBadRequest, "name is longer than 200 bytes")
		return
	}

	resp, err := a.Register(r.Context(), req)
	switch {
	case errors.Is(err, ErrEmailTaken):
		writeError(w, http.StatusConflict, ErrEmailTaken.Error())
		return
	case err != nil:
		a.logger().Error("register failed", "email", req.Email, "err", err)
		writeError(w, http.StatusInternalServerError, "registration failed")
		return
	}
	a.logger().Info("user registered", "user_id", resp.ID, "email", resp.Email, "outbox_ids", resp.OutboxIDs)
	writeJSON(w, http.StatusCreated, resp)
}

// Register inserts the user and one outbox row per registration topic in one transaction. If
// the email is taken it returns ErrEmailTaken and nothing is written: the transaction rolls
// back, so no event exists for a user that does not.
func (a *Account) Register(ctx context.Context, req RegisterRequest) (RegisterResponse, error) {
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	u := User{Email: req.Email, Name: req.Name, RegisteredAt: now().UTC().Truncate(time.Microsecond)}
	outboxIDs := map[string]int64{}
	err := a.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		// ON CONFLICT DO NOTHING instead of catching a driver-specific unique violation: no
		// row back means the email is taken, on SQLite and PostgreSQL alike.
		err := tx.QueryRowContext(ctx,
			`INSERT INTO users (email, name, registered_at) VALUES (?, ?, ?)
			 ON CONFLICT (email) DO NOTHING RETURNING id`,
			u.Email, u.Name, u.RegisteredAt).Scan(&u.ID)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrEmailTaken
		}
		if err != nil {
			return fmt.Errorf("insert user: %w", err)
		}
		payload, err := json.Marshal(UserRegistered{UserID: u.ID, Email: u.Email, RegisteredAt: u.RegisteredAt})
		if err != nil {
			return err
		}
		msgs := make([]outbox.Message, len(RegistrationTopics))
		for i, topic := range RegistrationTopics {
			msgs[i] = outbox.Message{Topic: topic, Key: strconv.FormatInt(u.ID, 10), Payload: payload}
		}
		ids, err := outbox.Enqueue(ctx, tx, msgs...)
		if err != nil {
			return err
		}
		for i, id := range ids {
			outboxIDs[RegistrationTopics[i]] = id
		}
		return nil
	})
	if err != nil {
		return RegisterResponse{}, err
	}
	return RegisterResponse{User: u, OutboxIDs: outboxIDs}, nil
}

func (a *Account) logger() *slog.Logger {
	if a.Log != nil {
		return a.Log
	}
	return slog.Default()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
