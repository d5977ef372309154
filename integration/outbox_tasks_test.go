package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/worker"
)

// "Save the document and queue its parsing" is one commit: the task row (outbox.InsertTask)
// is written in the producer's transaction and the relay inserts the task with the version
// rules. A committed one is inserted and pushed; a rolled-back one inserts nothing; a refused
// one (unknown queue, stale version) ends dead with the reason; a row delivered again after its
// task failed neither replaces the task nor goes dead.
func TestTaskInsertedThroughTheOutbox(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			ts := newTaskStackTuned(t, dialect, 5*time.Second, func(c *worker.Config) { c.DisableRelay = false })
			ctx := t.Context()
			w := startTaskWorker(t, func(_ *taskWorker, p api.TaskPush) {
				if p.TaskID == "doc-4" {
					report(t, ts.worker, p, "failure", 422, "unparseable pdf")
					return
				}
				report(t, ts.worker, p, "success", 200, "parsed")
			})
			ts.putQueue("docparse", map[string]any{"push_url": w.url, "retry": map[string]any{"max_attempts": 1}})
			db := ts.store.DB()
			_, err := db.ExecContext(ctx, "CREATE TABLE documents (id TEXT PRIMARY KEY, body TEXT NOT NULL)")
			require.NoError(t, err)

			// save writes a document and queues its parsing in one transaction.
			save := func(doc string, version int64, queue string, commit bool) int64 {
				var row int64
				err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
					if _, err := tx.ExecContext(ctx, "INSERT INTO documents (id, body) VALUES (?, ?)", doc, "%PDF"); err != nil {
						return err
					}
					var err error
					row, err = outbox.InsertTask(ctx, tx, courier.TaskRequest{TaskID: doc, Version: version, Queue: queue, Priority: 2,
						Payload: json.RawMessage(fmt.Sprintf(`{"document": %q}`, doc))})
					if err == nil && !commit {
						err = errRollBack
					}
					return err
				})
				if commit {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, errRollBack)
				}
				return row
			}
			status := func(row int64) courier.OutboxRecord {
				rec, err := ts.store.GetOutbox(ctx, row)
				require.NoError(t, err)
				return rec
			}
			waitRow := func(row int64, want courier.OutboxStatus) courier.OutboxRecord {
				var rec courier.OutboxRecord
				require.Eventually(t, func() bool { rec = status(row); return rec.Status == want }, time.Minute, 50*time.Millisecond,
					"row %d never became %s", row, want)
				return rec
			}

			committed := save("doc-1", 1, "docparse", true)
			save("doc-2", 1, "docparse", false)
			unknown := save("doc-3", 1, "nope", true)
			require.Equal(t, http.StatusCreated, ts.insert("doc-5", 2, 3, "docparse"))
			stale := save("doc-5", 1, "docparse", true)

			waitRow(committed, courier.OutboxSent) // the task exists from here on
			task := ts.waitStatus("doc-1", 1, courier.TaskSuccess, time.Minute)
			require.Equal(t, 2, task.Priority)
			require.JSONEq(t, `{"document":"doc-1"}`, string(task.Payload))

			rec := waitRow(unknown, courier.OutboxDead)
			require.Contains(t, rec.LastError, `queue "nope" does not exist`)
			rec = waitRow(stale, courier.OutboxDead)
			require.Contains(t, rec.LastError, "stale")
			ts.waitStatus("doc-5", 2, courier.TaskSuccess, time.Minute)

			require.Equal(t, http.StatusNotFound, ts.call(http.MethodGet, "/v1/tasks/doc-2/versions/1", ts.producer, nil, nil),
				"a rolled-back transaction inserts nothing")
			var n int
			require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM documents WHERE id = 'doc-2'").Scan(&n))
			require.Zero(t, n)

			// A row delivered again (as after a relay that died before marking it sent) finds its
			// task failed meanwhile: it is marked sent, the task stays failed and is not pushed again.
			again := save("doc-4", 1, "docparse", true)
			waitRow(again, courier.OutboxSent)
			ts.waitStatus("doc-4", 1, courier.TaskFailed, time.Minute)
			_, err = db.NewUpdate().Table("courier_outbox").Set("status = ?", courier.OutboxPending).
				Set("sent_at = NULL").Where("id = ?", again).Exec(ctx)
			require.NoError(t, err)
			rec = waitRow(again, courier.OutboxSent)
			require.Empty(t, rec.LastError)
			require.Equal(t, courier.TaskFailed, courier.TaskStatus(ts.get("doc-4", 1).Status), "a redelivered row never replaces its task")
			pushes := 0
			for _, p := range w.pushOrder() {
				if p.TaskID == "doc-4" {
					pushes++
				}
			}
			require.Equal(t, 1, pushes)
			require.Equal(t, 1, ts.get("doc-1", 1).Attempt, "one attempt, one version")
		})
	}
}

var errRollBack = fmt.Errorf("roll back (test)")
