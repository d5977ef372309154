package contract

import "time"

// PushBatchName pushes the attempts of one batch run (a queue in the batched dispatch mode), as
// a local activity of that run: it marks them pushed (their deadlines and heartbeat timeouts
// start, kept in their rows), sends them to the queue's worker endpoint, several to a request
// when the queue's push_batch_size asks for it, and ends each attempt the worker refused, or
// whose push failed after its tries, as a failure (the queue's retry policy decides what
// follows). The attempts it pushed are then the gateway's and the claimers' to finish: no run
// waits for them.
const PushBatchName = "task-push-batch"

// PushBatchParams is one batch run's input: the attempts a claim took, named by the batch
// (its workflow id, recorded on each attempt's row by the claim). The payloads stay in the
// database.
type PushBatchParams struct {
	Queue    string
	Batch    string
	Attempts []BatchAttempt
	// PushTimeout bounds one try of one request (the queue's push_timeout at the claim); zero:
	// courier.DefaultPushTimeout.
	PushTimeout time.Duration `json:",omitempty"`
	// PushBatchSize is how many attempts one request carries (the queue's push_batch_size at
	// the claim), so that a repeat of the push after a crash groups the attempts still due as
	// the first push did and each keeps its request's webhook-id; zero (a run started before
	// it was recorded): the queue's push_batch_size when the push runs.
	PushBatchSize int `json:",omitempty"`
	// Try is the try of its request the run makes first (0: the first). A request that fails
	// on the way leaves its batch: its attempts are handed to a run of their own, started
	// after the wait before the next try, which makes that try (and hands the request on
	// again if it fails too), so no batch stays open while one of its requests is retried.
	Try int `json:",omitempty"`
	// WebhookID is the webhook-id of the request such a run sends: the one its first try
	// carried ("": derived from the attempts, as the first push does).
	WebhookID string `json:",omitempty"`
}

// BatchAttempt is one attempt of a batch, with the timeouts it runs under (the queue's, with
// the task's overrides, fixed at the claim).
type BatchAttempt struct {
	TaskID            string
	Version           int64
	Attempt           int
	ProcessingTimeout time.Duration
	HeartbeatTimeout  time.Duration `json:",omitempty"` // 0: none
}

// PushBatchResult counts what one batch's push did.
type PushBatchResult struct {
	Pushed  int // taken by the worker
	Refused int // refused by the worker in its answer, each ended as a failure
	Failed  int // whose push failed after its tries, each ended as a failure
	Stale   int // moved on before the push (a result, a cancel, a timeout): not pushed
	Handed  int // whose request failed on the way, handed to a run of their own for its next try
}
