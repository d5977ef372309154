package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// TaskTopic is the reserved topic of rows that insert a task instead of publishing a message.
const TaskTopic = "courier.task.insert"

// InsertTask writes a row that makes courier's relay insert the task once tx commits, with the
// version rules of POST /v1/tasks ("save the document and queue its parsing" in one commit).
// The row's payload is the body of POST /v1/tasks (api.TaskRequest), so producers in any
// language can write it (durations as Go duration strings such as "30m").
// The request is checked here as the API checks it (ids, priority, payload size); whether its
// queue exists and its version is current is decided when the relay applies it, and a refused
// insert leaves the row dead with the reason. A redelivered row never inserts twice. r.Trace is
// ignored: the row carries ctx's trace context in its headers, as every outbox row does.
func InsertTask(ctx context.Context, tx Tx, r courier.TaskRequest) (int64, error) {
	if err := r.Normalize(); err != nil {
		return 0, err
	}
	body, err := json.Marshal(api.TaskRequestOf(r))
	if err != nil {
		return 0, err
	}
	ids, err := Enqueue(ctx, tx, Message{Topic: TaskTopic, Key: r.TaskID, Payload: body})
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// ParseTaskRow reads a TaskTopic row's payload back into the request it asks for; unknown
// fields and bad durations are refused as validation errors naming the field. The request is
// not yet normalized (store.InsertTask does that).
func ParseTaskRow(payload []byte) (courier.TaskRequest, error) {
	var row api.TaskRequest
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&row); err != nil {
		if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) && api.IsDurationType(te.Type) {
			return courier.TaskRequest{}, &courier.Error{Code: courier.CodeValidation,
				Message: fmt.Sprintf("%s must be a positive duration such as \"30m\"", te.Field), Details: map[string]any{"field": te.Field}}
		}
		return courier.TaskRequest{}, &courier.Error{Code: courier.CodeValidation,
			Message: "task row payload is not a task insert: " + err.Error()}
	}
	return row.Domain(), nil
}
