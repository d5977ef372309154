package courier

import (
	"strconv"
	"time"
)

// OutboxStatus is where an outbox record is in its life.
type OutboxStatus string

// Outbox record statuses. A producer inserts rows as pending; the relay moves them to
// dispatched when their delivery workflow has started; the workflow moves them to sent, or to
// dead when the retry budget is spent. Redrive moves a dead row back to pending.
const (
	OutboxPending    OutboxStatus = "pending"
	OutboxDispatched OutboxStatus = "dispatched"
	OutboxSent       OutboxStatus = "sent"
	OutboxDead       OutboxStatus = "dead"
)

// Valid reports whether s is one of the known statuses.
func (s OutboxStatus) Valid() bool {
	switch s {
	case OutboxPending, OutboxDispatched, OutboxSent, OutboxDead:
		return true
	}
	return false
}

// OutboxRecord is one row of the outbox table (see docs/outbox.md for the contract).
type OutboxRecord struct {
	ID            int64
	Topic         string
	Key           string
	Payload       []byte
	PayloadBytes  int // the payload's size, also when a list left the payload out
	Headers       map[string]string
	Status        OutboxStatus
	Attempts      int
	NextAttemptAt time.Time
	CreatedAt     time.Time
	SentAt        *time.Time
	LastError     string
	// WorkflowID is the workflow that took the record last when that was not the record's own
	// delivery (courier_outbox.workflow_id): its batch's (OutboxBatchWorkflowID) or its key's
	// (OutboxKeyWorkflowID); empty otherwise.
	WorkflowID string
	// OwnRun says the record's own delivery (OutboxWorkflowID) took it last: it has been claimed
	// or tried, by no batch or key, and it is not a row the relay handles without a workflow
	// (a timer to arm, a task to insert). RunID puts the two together.
	OwnRun bool
	// Malformed says why a row breaks the table contract in a way the database could not stop
	// (headers that are not a JSON object of strings); such a row is never published.
	Malformed string
}

// RunID is the workflow that delivered the record of source, is delivering it or tried it last:
// its batch's, its key's or its own; "" while none has taken it (a pending record not yet
// claimed, or handed back before its delivery started). The API answers it as workflow_id.
func (r OutboxRecord) RunID(source string) string {
	switch {
	case r.WorkflowID != "":
		return r.WorkflowID
	case r.OwnRun:
		return OutboxWorkflowID(source, r.ID)
	}
	return ""
}

// OutboxFilter selects outbox records for a listing. Records come in ascending id order, after
// AfterID.
type OutboxFilter struct {
	Status  OutboxStatus // "" for every status
	Topic   string       // "" for every topic
	AfterID int64        // keyset pagination: ids greater than this
	Limit   int          // records per page; 0 means 100, and at most 1000 are returned
	// WithPayload loads the payloads; without it records carry only PayloadBytes, so a page of
	// large records costs the reader nothing.
	WithPayload bool
	// PayloadBudget bounds the payload bytes one page loads (WithPayload only): the page ends
	// before the record that would pass it, but always holds at least one record. 0 means the
	// store's default (4 MiB).
	PayloadBudget int64
}

// DeadFilter chooses dead outbox records for a bulk redrive. A dead record's next_attempt_at is
// when it went dead.
type DeadFilter struct {
	Topic      string    // a topic pattern (MatchTopic); empty: every topic
	DeadSince  time.Time // zero: no lower bound; inclusive
	DeadBefore time.Time // zero: no upper bound; exclusive
	AfterID    int64     // records with a greater id only
}

// DeadRef names one dead outbox record by id and topic; its payload stays in the database.
type DeadRef struct {
	ID    int64
	Topic string
}

// DefaultSource names courier's own database among the outbox sources.
const DefaultSource = "default"

// OutboxMessageID is the broker message id of a record, used by the broker to deduplicate:
// the outbox id itself, prefixed by the source for producers' databases.
func OutboxMessageID(source string, id int64) string {
	if source == "" || source == DefaultSource {
		return strconv.FormatInt(id, 10)
	}
	return source + "/" + strconv.FormatInt(id, 10)
}

// BlockedKey is an ordered key (docs/flow-control.md, "Ordered keys in the outbox") whose next
// record spent its retry budget: that record is dead, and the key's later records wait behind
// it until an operator redrives it (after fixing the cause) or skips it.
type BlockedKey struct {
	Key       string
	RecordID  int64  // the dead record the key waits on
	Topic     string // its topic
	Reason    string // its last error
	BlockedAt time.Time
	Waiting   int64 // the records of the key not yet sent (pending or dispatched), of any topic
}

// OrderedScope says which records of an outbox source are ordered by key (the ordered mode):
// every keyed record (All), or the keyed records whose topic matches one of Topics (patterns
// of CheckTopicPattern). A record without a key never is.
type OrderedScope struct {
	All    bool
	Topics []string
}

// On reports whether the scope orders anything.
func (o OrderedScope) On() bool { return o.All || len(o.Topics) > 0 }

// Has reports whether a record of topic with key is in the scope.
func (o OrderedScope) Has(topic, key string) bool {
	if key == "" {
		return false
	}
	if o.All {
		return true
	}
	for _, p := range o.Topics {
		if MatchTopic(p, topic) {
			return true
		}
	}
	return false
}
