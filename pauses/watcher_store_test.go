package pauses_test

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/dispatch"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/pauses"
)

// A queue paused and resumed between two of a watcher's reads held a claim meanwhile (the claim
// reads the pause in its own transaction), so the watcher must still tell of the resume: that
// is what wakes the claimer on SQLite. The watcher here reads only when kicked; it is kicked
// once, after the resume, as when both fall within one of its refreshes.
func TestWatcherTellsOfAPauseLiftedBetweenReads(t *testing.T) {
	for _, dialect := range testenv.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st, _ := testenv.Store(t, dialect)
			_, _, err := st.PutQueue(ctx, courier.Queue{Name: "docs", ConcurrencyLimit: 5, PushURL: "http://127.0.0.1:9/push"})
			require.NoError(t, err)
			_, _, err = st.InsertTask(ctx, courier.TaskRequest{TaskID: "t1", Version: 1, Queue: "docs", Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)

			w := pauses.NewWatcher(st, time.Hour, slog.New(slog.DiscardHandler))
			told := make(chan courier.Pauses, 10)
			w.OnChange(func(_, after courier.Pauses) { told <- after })
			require.NoError(t, w.Start(ctx))

			_, _, err = st.Pause(ctx, courier.Pause{Kind: courier.PauseQueue, Name: "docs"})
			require.NoError(t, err)
			d := dispatch.New()
			held, err := d.Claim(ctx, st, "docs", 10)
			require.NoError(t, err)
			require.Empty(t, held.Attempts, "the claim reads the pause")
			_, err = st.Resume(ctx, courier.PauseQueue, "docs")
			require.NoError(t, err)

			w.Kick()
			select {
			case after := <-told:
				require.Zero(t, after.Len(), "nothing is paused now")
			case <-time.After(10 * time.Second):
				t.Fatal("the watcher did not tell of the resume: a claimer held by the pause is never woken")
			}
			claimed, err := d.Claim(ctx, st, "docs", 10)
			require.NoError(t, err)
			require.Len(t, claimed.Attempts, 1, "the claim the resume wakes takes the task")
		})
	}
}
