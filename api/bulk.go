package api

// BulkResult is what every bulk action answers (POST /v1/outbox/redrive, /v1/timers/redeliver,
// /v1/tasks/bulk/cancel, /v1/tasks/bulk/retry; docs/api.md, "Bulk actions"): how many items
// the filter took, how many the action was done to, how many it left as they were, and
// whether more match beyond max (call again for the next ones).
type BulkResult struct {
	Matched int  `json:"matched"` // items the filter took this call, at most max: done + skipped
	Done    int  `json:"done"`    // items the action was done to
	Skipped int  `json:"skipped"` // matched, but changed meanwhile (or still busy) and left as they were
	More    bool `json:"more"`    // matching items remain beyond max
}

// NewBulkResult is the answer of a bulk action that did done items and skipped others.
func NewBulkResult(done, skipped int, more bool) BulkResult {
	return BulkResult{Matched: done + skipped, Done: done, Skipped: skipped, More: more}
}

// NewRedriveResult answers a bulk redrive: done records redriven, busy ones skipped.
func NewRedriveResult(done, busy int, more bool) RedriveResult {
	return RedriveResult{BulkResult: NewBulkResult(done, busy, more)}
}

// NewTimerRedeliverResult answers a bulk timer redelivery.
func NewTimerRedeliverResult(done, skipped int, more bool) TimerRedeliverResult {
	return TimerRedeliverResult{BulkResult: NewBulkResult(done, skipped, more)}
}

// NewTaskCancelResult answers a bulk cancel.
func NewTaskCancelResult(done, skipped int, more bool) TaskCancelResult {
	return TaskCancelResult{BulkResult: NewBulkResult(done, skipped, more)}
}

// NewTaskRetryResult answers a bulk retry.
func NewTaskRetryResult(done, skipped int, more bool) TaskRetryResult {
	return TaskRetryResult{BulkResult: NewBulkResult(done, skipped, more)}
}
