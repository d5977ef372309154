package contract

// Registered names of the outbox activities (stable; never the Go method names).
const (
	DeliverOutboxName  = "outbox-deliver"
	MarkOutboxDeadName = "outbox-mark-dead"
)

// Non-retryable error types raised by the outbox activities.
const (
	ErrTypeUnknownTopic   = "UnknownTopic"
	ErrTypeOutboxNotFound = "OutboxNotFound"
	ErrTypeUnknownSource  = "UnknownSource"
	// ErrTypeRefusedMessage marks a row that breaks courier's message rule (a broker control
	// subject such as $JS.API.…, a reply subject, a reserved header, unreadable headers): it
	// is dead at once and never reaches the broker.
	ErrTypeRefusedMessage = "RefusedMessage"
	// ErrTypePublishRetry marks an attempt the broker did not acknowledge (down, slow, cut):
	// retried by the budget. It is benign: an expected condition, logged at debug level by
	// the SDK (the broker's outage is logged once by the router).
	ErrTypePublishRetry = "PublishRetry"
)

// DeliverParams names the record to deliver.
type DeliverParams struct {
	Source string
	ID     int64
}

// DeliverResult says what the delivery did.
type DeliverResult struct {
	AlreadySent bool // the record was already sent (a repeated delivery): nothing was published
	// Paused: the record's topic is paused. Nothing was published and no attempt counted; the
	// record is pending again and the relay leaves it alone until the topic is resumed.
	Paused bool `json:",omitempty"`
}

// MarkDeadParams names the record to mark dead and why.
type MarkDeadParams struct {
	Source    string
	ID        int64
	LastError string
}

// Registered names of the outbox batch mode's activities (stable).
const (
	PublishOutboxBatchName = "outbox-publish-batch"
	HandOutboxBatchName    = "outbox-hand-batch"
)

// BatchParams names the records of one batch.
type BatchParams struct {
	Source string
	IDs    []int64
}

// BatchResult says what became of a batch's records.
type BatchResult struct {
	Sent    int     // published and marked sent by this attempt
	Skipped int     // already sent or dead (a repeated batch), or gone
	Handed  []int64 // failed and handed to deliveries of their own
	// Held are records whose topic is paused: pending again, no attempt counted, published
	// by a later claim once the topic is resumed.
	Held []int64 `json:",omitempty"`
}

// HandParams hands a batch's records to deliveries of their own, with the reason.
type HandParams struct {
	Source    string
	IDs       []int64
	LastError string
}
