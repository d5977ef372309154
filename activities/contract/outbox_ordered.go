package contract

import (
	"time"

	"github.com/courier-oss/courier"
)

// Registered names of the outbox ordered mode's activities (stable; docs/flow-control.md,
// "Ordered keys in the outbox").
const (
	ClaimOrderedName   = "outbox-ordered-claim"
	PublishOrderedName = "outbox-ordered-publish"
	BlockOrderedName   = "outbox-ordered-block"
)

// ClaimOrderedParams asks for a key's next records, at most Max, in commit order.
type ClaimOrderedParams struct {
	Source string
	Key    string
	Scope  courier.OrderedScope
	Max    int
	Lease  time.Duration // how long the claimed records stay dispatched to this run
}

// ClaimOrderedResult is what a claim took: the key's next records (none when the key is done,
// blocked or its next record's topic is paused).
type ClaimOrderedResult struct {
	IDs      []int64
	Attempts int  // the first record's attempts so far
	Blocked  bool // the key is blocked: an operator must redrive or skip its record
	Paused   bool // the next record's topic is paused
}

// PublishOrderedParams names claimed records to publish one after another, in this order.
type PublishOrderedParams struct {
	Source  string
	IDs     []int64
	RetryIn time.Duration // the wait after a failure, for the failed record's next_attempt_at
}

// PublishOrderedResult says how far the publish got. Records before FailedID were published
// and marked sent; FailedID (zero: none failed) had its attempt counted with LastError; the
// records after it are pending again, behind it.
type PublishOrderedResult struct {
	Sent           int
	FailedID       int64
	FailedAttempts int    // the failed record's attempts, this one included
	LastError      string // why it failed
	Permanent      bool   // no retry can publish it (refused by the message rule, unknown topic)
	// Held: the record at FailedID is of a paused topic; it and those after it are pending
	// again, no attempt counted.
	Held bool
}

// BlockOrderedParams marks a key's record dead and blocks the key behind it.
type BlockOrderedParams struct {
	Source    string
	ID        int64
	LastError string
}

// BlockOrderedResult says whether the record blocks its key now. Runs recorded before it
// existed completed the activity without a result (and read none).
type BlockOrderedResult struct {
	Blocked bool   // false: the record was sent meanwhile and blocks nothing
	Topic   string // the record's topic, for the run's search attributes
}
