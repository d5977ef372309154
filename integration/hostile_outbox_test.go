package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/outbox"
)

// Rows that would make the broker act instead of deliver (JetStream API subjects that purge or
// delete a stream, reply subjects, headers such as Nats-Rollup) never reach NATS, whether they
// come through the API or straight into the outbox table: the API refuses them with 400, the
// relay ends such rows dead at once with the reason, and the stream keeps every message.
func TestHostileOutboxRowsNeverReachTheBroker(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			s := newStack(t, dialect)
			s.createStream("ORDERS", "orders.>")
			ctx := t.Context()

			// Rows a producer wrote by hand, past every API check.
			hostile := map[string]struct{ topic, headers string }{
				"purge":          {"$JS.API.STREAM.PURGE.ORDERS", ""},
				"delete":         {"$JS.API.STREAM.DELETE.ORDERS", ""},
				"kv":             {"$KV.bucket.key", ""},
				"reply":          {"_INBOX.abc", ""},
				"rollup header":  {"orders.created", `{"Nats-Rollup":"all"}`},
				"expected seq":   {"orders.created", `{"Nats-Expected-Last-Sequence":"0"}`},
				"unreadable hdr": {"orders.created", `not json`},
			}
			ids := map[int64]string{}
			for name, h := range hostile {
				var headers any
				if h.headers != "" {
					headers = h.headers
				}
				var id int64
				require.NoError(t, s.store.DB().NewRaw(`INSERT INTO courier_outbox (topic, "key", payload, headers) VALUES (?, '', ?, ?) RETURNING id`,
					h.topic, []byte(`{}`), headers).Scan(ctx, &id))
				ids[id] = name
			}
			good, err := outbox.Enqueue(ctx, s.store.DB(), outbox.Message{Topic: "orders.created", Payload: []byte(`{"ok":1}`)})
			require.NoError(t, err)

			url, token := s.gateway(nil)
			for _, body := range []string{
				`{"topic":"$JS.API.STREAM.PURGE.ORDERS","payload":{}}`,
				`{"topic":"orders.created","payload":{},"headers":{"Nats-Rollup":"all"}}`,
			} {
				req, err := http.NewRequest(http.MethodPost, url+"/v1/outbox", strings.NewReader(body))
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
			}

			s.startWorker(false)
			require.Eventually(t, func() bool {
				c := s.countByStatus()
				return c[courier.OutboxDead] == int64(len(hostile)) && c[courier.OutboxSent] == 1
			}, time.Minute, 50*time.Millisecond, "hostile rows dead, the good one sent")
			for id, name := range ids {
				rec, err := s.store.GetOutbox(ctx, id)
				require.NoError(t, err)
				require.Equal(t, courier.OutboxDead, rec.Status, name)
				require.Contains(t, rec.LastError, "refused, never published", name)
				require.Equal(t, 1, rec.Attempts+1, "%s: dead at once, no publish attempt", name)
			}
			got, _ := s.streamIDs("ORDERS")
			require.Equal(t, map[string]int{idString(good[0]): 1}, got, "the stream holds exactly the good message: nothing purged, deleted or rolled up")
		})
	}
}
