package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

// The ordered mode's statements (docs/flow-control.md, "Ordered keys in the outbox"). The
// records of a key go out one after another in commit order: COALESCE(commit_seq, id), where
// commit_seq is given at commit on PostgreSQL (schema/outbox 0003) and ids are taken in commit
// order on SQLite. A key's next record is its first unsent one (pending or dispatched) in that
// order; a key whose next record went dead is blocked (courier_outbox_blocked_keys) until an
// operator redrives or skips that record.

// orderSQL is a row's place in its key's commit order.
const orderSQL = "COALESCE(commit_seq, id)"

// blockedKeyRow is the bun model of courier_outbox_blocked_keys.
type blockedKeyRow struct {
	bun.BaseModel `bun:"table:courier_outbox_blocked_keys"`

	Key       string    `bun:"key,pk"`
	RecordID  int64     `bun:"record_id"`
	Topic     string    `bun:"topic"`
	Reason    string    `bun:"reason"`
	BlockedAt time.Time `bun:"blocked_at"`
}

// OrderedKeysDue returns up to limit keys of the ordered scope whose next record can go out
// now: it is pending and due, or dispatched with its lease run out (its delivery may have
// died), its key is not blocked and its topic is not paused (pausedTopics, exact patterns
// only; the delivery checks the others). The relay starts each key's delivery for them.
func (s *Store) OrderedKeysDue(ctx context.Context, scope courier.OrderedScope, pausedTopics []string, limit int) ([]string, error) {
	if !scope.On() {
		return nil, nil
	}
	var args []any
	ordO, a := s.orderedSQL("o.", scope)
	args = append(args, a...)
	ordP, a := s.orderedSQL("p.", scope)
	args = append(args, a...)
	var paused []string
	for _, p := range pausedTopics {
		if TopicPatternExact(p) {
			paused = append(paused, p)
		}
	}
	notPaused := ""
	if len(paused) > 0 {
		cond, a, _ := s.anyTopicSQL("o.topic", paused)
		notPaused = " AND NOT " + cond
		args = append(args, a...)
	}
	args = append(args, limit)
	q := `SELECT DISTINCT o."key" FROM courier_outbox o WHERE o.status IN ('pending', 'dispatched')` +
		" AND o.next_attempt_at <= " + s.nowSQL() + " AND " + ordO + notPaused +
		` AND NOT EXISTS (SELECT 1 FROM courier_outbox_blocked_keys b WHERE b."key" = o."key")` +
		` AND NOT EXISTS (SELECT 1 FROM courier_outbox p WHERE p."key" = o."key" AND p.status IN ('pending', 'dispatched')` +
		" AND " + ordP + " AND COALESCE(p.commit_seq, p.id) < COALESCE(o.commit_seq, o.id))" +
		` LIMIT ?`
	var keys []string
	if err := s.db.NewRaw(q, args...).Scan(ctx, &keys); err != nil {
		return nil, err
	}
	return keys, nil
}

// OrderedClaim is what ClaimOrdered took: the key's next records, in commit order, now
// dispatched to the caller.
type OrderedClaim struct {
	IDs    []int64
	Topics []string
	// Attempts are the first record's attempts so far: the key's delivery spends the retry
	// budget on it from there, across crashes and runs.
	Attempts int
	Blocked  bool // the key is blocked: nothing was taken
	// Paused: the key's next record is of a paused topic; nothing was taken.
	Paused bool
}

// ClaimOrdered takes up to limit of key's next records in commit order, stopping before the
// first record of a paused topic (paused reports it), and marks them dispatched with a lease
// to the key's delivery run, workflowID (courier.OutboxKeyWorkflowID), which the rows keep as
// the run that delivers them (workflow_id).
// Only the key's own delivery calls it (one run per key at a time, by workflow id), so it takes
// dispatched records too: those are its own from before a crash. Nothing is taken from a
// blocked key.
func (s *Store) ClaimOrdered(ctx context.Context, key, workflowID string, scope courier.OrderedScope, limit int, lease time.Duration, paused func(topic string) bool) (OrderedClaim, error) {
	var out OrderedClaim
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		out = OrderedClaim{}
		n, err := tx.NewSelect().Model((*blockedKeyRow)(nil)).Where(`"key" = ?`, key).Count(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			out.Blocked = true
			return nil
		}
		ord, args := s.orderedSQL("", scope)
		var rows []struct {
			ID       int64  `bun:"id"`
			Topic    string `bun:"topic"`
			Attempts int    `bun:"attempts"`
		}
		q := tx.NewSelect().TableExpr("courier_outbox").Column("id", "topic", "attempts").
			Where(`"key" = ?`, key).Where("status IN ('pending', 'dispatched')").
			Where(ord, args...).OrderExpr(orderSQL).Limit(int64(limit))
		if s.pg {
			q = q.For("UPDATE")
		}
		if err := q.Scan(ctx, &rows); err != nil {
			return err
		}
		for i, r := range rows {
			if paused != nil && paused(r.Topic) {
				out.Paused = i == 0
				break
			}
			if i == 0 {
				out.Attempts = r.Attempts
			}
			out.IDs = append(out.IDs, r.ID)
			out.Topics = append(out.Topics, r.Topic)
		}
		if len(out.IDs) == 0 {
			return nil
		}
		_, err = tx.NewUpdate().Model((*outboxRow)(nil)).
			Set("status = ?", courier.OutboxDispatched).
			Set("workflow_id = ?", workflowID).
			Set("next_attempt_at = "+s.nowPlusSQL(lease)).
			Where("id IN (?)", bun.List(out.IDs)).Exec(ctx)
		return err
	})
	return out, err
}

// BlockKey marks a key's next record dead with its last error and blocks the key behind it,
// in one transaction: the key's later records wait until the record is redriven or skipped.
// A record sent meanwhile blocks nothing (false).
func (s *Store) BlockKey(ctx context.Context, id int64, lastErr string) (bool, error) {
	var blocked bool
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var row outboxRow
		if err := tx.NewSelect().Model(&row).Column("id", "topic", "key", "status").Where("id = ?", id).Scan(ctx); err != nil {
			return err
		}
		if row.Status == string(courier.OutboxSent) {
			return nil
		}
		if _, err := tx.NewUpdate().Model((*outboxRow)(nil)).
			Set("status = ?", courier.OutboxDead).
			Set("last_error = ?", lastErr).
			Set("next_attempt_at = "+s.nowSQL()).
			Where("id = ?", id).Exec(ctx); err != nil {
			return err
		}
		b := blockedKeyRow{Key: row.Key, RecordID: id, Topic: row.Topic, Reason: lastErr}
		if _, err := tx.NewInsert().Model(&b).ExcludeColumn("blocked_at").
			On("CONFLICT (\"key\") DO UPDATE").
			Set("record_id = EXCLUDED.record_id, topic = EXCLUDED.topic, reason = EXCLUDED.reason, blocked_at = " + s.nowSQL()).
			Exec(ctx); err != nil {
			return err
		}
		blocked = true
		return nil
	})
	return blocked, err
}

// BlockedKeys lists blocked keys by key, a page of up to limit after the key after, and
// whether more follow.
func (s *Store) BlockedKeys(ctx context.Context, after string, limit int) ([]courier.BlockedKey, bool, error) {
	if limit <= 0 {
		limit = 100
	}
	var rows []blockedKeyRow
	if err := s.db.NewSelect().Model(&rows).Where(`"key" > ?`, after).OrderExpr(`"key" ASC`).
		Limit(int64(limit) + 1).Scan(ctx); err != nil {
		return nil, false, err
	}
	more := len(rows) > limit
	rows = rows[:min(len(rows), limit)]
	out := make([]courier.BlockedKey, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.blockedKey())
	}
	if len(out) == 0 {
		return out, more, nil
	}
	// How many records wait behind each key.
	keys := make([]string, len(out))
	for i := range out {
		keys[i] = out[i].Key
	}
	var waiting []struct {
		Key string `bun:"key"`
		N   int64  `bun:"n"`
	}
	if err := s.db.NewSelect().TableExpr("courier_outbox").ColumnExpr(`"key", count(*) AS n`).
		Where(`"key" IN (?)`, bun.List(keys)).Where("status IN ('pending', 'dispatched')").
		GroupExpr(`"key"`).Scan(ctx, &waiting); err != nil {
		return nil, false, err
	}
	for _, w := range waiting {
		for i := range out {
			if out[i].Key == w.Key {
				out[i].Waiting = w.N
			}
		}
	}
	return out, more, nil
}

func (r blockedKeyRow) blockedKey() courier.BlockedKey {
	return courier.BlockedKey{Key: r.Key, RecordID: r.RecordID, Topic: r.Topic, Reason: r.Reason, BlockedAt: r.BlockedAt.UTC()}
}

// CountBlockedKeys counts the blocked keys (the courier_outbox_blocked_keys gauge).
func (s *Store) CountBlockedKeys(ctx context.Context) (int64, error) {
	n, err := s.db.NewSelect().Model((*blockedKeyRow)(nil)).Count(ctx)
	return int64(n), err
}

// SkipBlocked unblocks the key that record id blocks, leaving the record dead: the key's later
// records go out. A record that blocks no key is a conflict; an unknown id is not_found.
func (s *Store) SkipBlocked(ctx context.Context, id int64) (courier.BlockedKey, error) {
	var out courier.BlockedKey
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var b blockedKeyRow
		err := tx.NewSelect().Model(&b).Where("record_id = ?", id).Limit(1).Scan(ctx)
		if errors.Is(err, sql.ErrNoRows) {
			var n int64
			if n, err = tx.NewSelect().Model((*outboxRow)(nil)).Where("id = ?", id).Count(ctx); err != nil {
				return err
			}
			if n == 0 {
				return courier.Errorf(courier.CodeNotFound, "outbox record %d not found", id)
			}
			return &courier.Error{Code: courier.CodeConflict,
				Message: fmt.Sprintf("outbox record %d blocks no key; only the record a blocked key waits on can be skipped", id)}
		}
		if err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*blockedKeyRow)(nil)).Where(`"key" = ?`, b.Key).Exec(ctx); err != nil {
			return err
		}
		out = b.blockedKey()
		return nil
	})
	return out, err
}

// unblockRecords lifts the blocks that records hold, in tx: a redriven record is pending again
// and, being its key's next record, goes out first.
func unblockRecords(ctx context.Context, tx bun.IDB, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.NewDelete().Model((*blockedKeyRow)(nil)).Where("record_id IN (?)", bun.List(ids)).Exec(ctx)
	return err
}

// TurnOnCommitOrder turns on the commit-time numbering of scope's keyed records for this
// database (courier_outbox_settings, schema/outbox 0003): from the commit after it, each keyed
// record of an ordered topic takes its key's lock and a commit_seq. A relay whose ordered mode
// covers the database calls it at start, before it delivers any key; until then, and for
// records committed while it was off, the order is the id. It only widens: the topics become
// the union of every caller's (every keyed record once one orders the whole source), so relays
// of a fleet mid-rollout with different settings each keep theirs numbered. Nothing in courier
// turns it off or narrows it (SetCommitOrder): a relay without the ordered mode says nothing.
//
// ready reports whether every transaction that could have read the row before the change has
// ended: a producer whose trigger read "off" (or not this topic) just before the switch may
// commit its record unnumbered a moment after it, and that record must not be overtaken, so
// keys are delivered only once ready. It is judged on transaction ids: exact for producers in
// READ COMMITTED (the trigger reads the row at commit); a REPEATABLE READ or SERIALIZABLE
// producer whose snapshot predates the switch is not covered (docs/flow-control.md).
// SQLite needs no numbering (ids are taken in commit order): ready at once there.
func (s *Store) TurnOnCommitOrder(ctx context.Context, scope courier.OrderedScope) (ready bool, err error) {
	if !s.pg || !scope.On() {
		return true, nil
	}
	if err := s.turnOnCommitOrder(ctx, scope); err != nil {
		return false, fmt.Errorf("turn on the outbox commit order: %w", err)
	}
	// The horizon is taken after the change committed: every transaction that read the row
	// before then has an id below the snapshot's xmax (it wrote a record, so it has one).
	if _, err := s.db.NewRaw("UPDATE courier_outbox_settings SET ready_after = txid_snapshot_xmax(txid_current_snapshot()) WHERE id AND ready_after IS NULL").
		Exec(ctx); err != nil {
		return false, fmt.Errorf("turn on the outbox commit order: %w", err)
	}
	if err := s.db.NewRaw("SELECT txid_snapshot_xmin(txid_current_snapshot()) >= ready_after FROM courier_outbox_settings WHERE id").
		Scan(ctx, &ready); err != nil {
		return false, fmt.Errorf("turn on the outbox commit order: %w", err)
	}
	return ready, nil
}

func (s *Store) turnOnCommitOrder(ctx context.Context, scope courier.OrderedScope) error {
	return s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var cur struct {
			Ordered bool           `bun:"ordered"`
			Topics  sql.NullString `bun:"ordered_topics"`
		}
		if err := tx.NewRaw("SELECT ordered, ordered_topics FROM courier_outbox_settings WHERE id FOR UPDATE").Scan(ctx, &cur); err != nil {
			return err
		}
		var topics []string // nil: every keyed record
		if !scope.All {
			var had []string
			if cur.Ordered && cur.Topics.Valid {
				if err := json.Unmarshal([]byte(cur.Topics.String), &had); err != nil {
					return fmt.Errorf("courier_outbox_settings.ordered_topics: %w", err)
				}
			}
			if !cur.Ordered || cur.Topics.Valid {
				topics = append(had, scope.Topics...)
				slices.Sort(topics)
				topics = slices.Compact(topics)
			}
		}
		var raw, match sql.NullString
		if topics != nil {
			b, _ := json.Marshal(topics)
			raw = sql.NullString{String: string(b), Valid: true}
			match = sql.NullString{String: topicsRegexp(topics), Valid: true}
		}
		if cur.Ordered && raw == cur.Topics {
			return nil
		}
		_, err := tx.NewRaw("UPDATE courier_outbox_settings SET ordered = true, ordered_topics = ?, ordered_match = ?, ready_after = NULL, changed_at = now() WHERE id",
			raw, match).Exec(ctx)
		return err
	})
}

// topicsRegexp is a POSIX regular expression (PostgreSQL's ~) that matches a topic exactly when
// courier.MatchTopic matches it with one of patterns: '*' is one token (which may be empty), '>'
// one or more.
func topicsRegexp(patterns []string) string {
	alts := make([]string, 0, len(patterns))
	for _, p := range patterns {
		toks := strings.Split(p, ".")
		for i, tok := range toks {
			switch tok {
			case "*":
				toks[i] = "[^.]*"
			case ">":
				toks[i] = ".*"
			default:
				toks[i] = regexp.QuoteMeta(tok)
			}
		}
		alts = append(alts, "^"+strings.Join(toks, `\.`)+"$")
	}
	return strings.Join(alts, "|")
}

// SetCommitOrder turns the commit-time numbering of keyed records off for this database (on:
// of every keyed record). Off is for an operator once no relay orders this database any more
// (docs/flow-control.md, "Turning the commit order on and off"). A no-op on SQLite.
func (s *Store) SetCommitOrder(ctx context.Context, on bool) error {
	if !s.pg {
		return nil
	}
	_, err := s.db.NewRaw("UPDATE courier_outbox_settings SET ordered = ?, ordered_topics = NULL, ordered_match = NULL, ready_after = NULL, changed_at = now() WHERE id", on).Exec(ctx)
	if err != nil {
		return fmt.Errorf("set the outbox commit order to %t: %w", on, err)
	}
	return nil
}

// CommitOrder reports whether keyed records are numbered at commit on this database (always
// false on SQLite, whose ids are the commit order), and of which topic patterns (nil: every
// keyed record).
func (s *Store) CommitOrder(ctx context.Context) (bool, []string, error) {
	if !s.pg {
		return false, nil, nil
	}
	var cur struct {
		Ordered bool           `bun:"ordered"`
		Topics  sql.NullString `bun:"ordered_topics"`
	}
	if err := s.db.NewRaw("SELECT ordered, ordered_topics FROM courier_outbox_settings WHERE id").Scan(ctx, &cur); err != nil {
		return false, nil, err
	}
	var topics []string
	if cur.Topics.Valid {
		if err := json.Unmarshal([]byte(cur.Topics.String), &topics); err != nil {
			return false, nil, err
		}
	}
	return cur.Ordered, topics, nil
}
