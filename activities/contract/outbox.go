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
)

// DeliverParams names the record to deliver.
type DeliverParams struct {
	Source string
	ID     int64
}

// DeliverResult says what the delivery did.
type DeliverResult struct {
	AlreadySent bool // the record was already sent (a repeated delivery): nothing was published
}

// MarkDeadParams names the record to mark dead and why.
type MarkDeadParams struct {
	Source    string
	ID        int64
	LastError string
}
