package activities_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/activities/contract"
)

// bucketRows is a bucket's timers as the reserve sees them: due ones it takes, and the fire
// time of the earliest one still scheduled.
type bucketRows struct {
	activities.TimerRunStore // the calls a reserve does not make
	due                      int
	next                     time.Time
}

func (b *bucketRows) ReserveDueTimers(_ context.Context, _ string, _ int64, _ string, limit int) (int, []courier.TimerBucketRef, error) {
	n := min(b.due, limit)
	b.due -= n
	return n, nil, nil
}

func (b *bucketRows) NextDueTimer(context.Context, string, int64) (time.Time, bool, error) {
	return b.next, !b.next.IsZero(), nil
}

// A reserve says how many timers it holds, and, holding none, when the bucket's next one is
// due (zero once none is left): the bucket waits for it instead of scheduling a delivery.
func TestReserveBatchSaysWhenTheNextIsDue(t *testing.T) {
	next := time.Date(2026, 11, 29, 10, 0, 0, 500_000_000, time.UTC)
	rows := &bucketRows{next: next}
	a := activities.NewTimerRuns(rows, func(context.Context, string) (contract.BizTypeDelivery, error) {
		return contract.BizTypeDelivery{}, nil
	})
	p := contract.DeliverTimerBatchParams{BizType: "coupons", Bucket: next.Unix(), Claim: "run/1", Limit: 1000}

	got, err := a.ReserveBatch(t.Context(), p)
	require.NoError(t, err)
	require.Equal(t, contract.ReserveTimerBatchResult{NextDue: next}, got, "none due yet: when the next is")

	rows.due = 3
	got, err = a.ReserveBatch(t.Context(), p)
	require.NoError(t, err)
	require.Equal(t, contract.ReserveTimerBatchResult{Reserved: 3}, got)

	rows.next = time.Time{}
	got, err = a.ReserveBatch(t.Context(), p)
	require.NoError(t, err)
	require.Equal(t, contract.ReserveTimerBatchResult{}, got, "none left")
}
