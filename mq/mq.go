package mq

import (
	"context"
	"errors"
	"time"
)

// Message is one message to publish. ID is the broker-side deduplication id (the outbox id).
type Message struct {
	ID      string
	Topic   string
	Key     string
	Payload []byte
	Headers map[string]string
}

// Publisher publishes messages. Publish returns nil only once the broker has acknowledged the
// message durably; an error wrapping ErrUnknownTopic means no destination exists for the topic
// (a permanent failure until an operator creates it).
type Publisher interface {
	Publish(ctx context.Context, m Message) error
	Ping(ctx context.Context) error
	Close() error
}

// ErrUnknownTopic reports that the broker has no destination for a topic.
var ErrUnknownTopic = errors.New("mq: no destination for topic")

// ErrRefused reports a message that breaks courier's message rule (courier.CheckMessage): a
// broker control subject, a reply subject or a reserved header. Publishers check every message
// before it leaves, whatever path it came by; the refusal is permanent.
var ErrRefused = errors.New("mq: message refused")

// Header names courier adds to every published message.
const (
	HeaderMessageID = "Courier-Message-Id"
	HeaderKey       = "Courier-Key"
)

// DefaultPublishTimeout bounds a Publish (or a batch publish) whose context has no deadline, in
// every adapter.
const DefaultPublishTimeout = 10 * time.Second
