package courier

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// PauseKind is what a pause holds: a task queue, a business type (its timers' and schedules'
// deliveries) or the outbox records of a topic pattern.
type PauseKind string

// The kinds of pause.
const (
	PauseQueue   PauseKind = "queue"
	PauseBizType PauseKind = "biz_type"
	PauseTopic   PauseKind = "topic"
)

// PauseKinds lists every kind, in the order the API documents them.
var PauseKinds = []PauseKind{PauseQueue, PauseBizType, PauseTopic}

// MaxPauseReasonBytes bounds a pause's reason.
const MaxPauseReasonBytes = 1024

// Pause is one thing held: work for it is still accepted and kept, nothing of it is pushed,
// called back or published until it is resumed, and nothing is counted against a retry budget
// meanwhile (docs/flow-control.md).
type Pause struct {
	Kind     PauseKind
	Name     string // a queue or business type name, or a topic pattern ("orders.>")
	Reason   string // the operator's words, shown wherever the pause is
	PausedBy string // who paused it: "api key <name> (<id>)", or the CLI's user
	PausedAt time.Time
}

// Valid reports whether k is one of PauseKinds.
func (k PauseKind) Valid() bool { return slices.Contains(PauseKinds, k) }

// CheckPause applies the rules of a pause's kind, name and reason; a refusal names its field.
func CheckPause(kind PauseKind, name, reason string) error {
	switch kind {
	case PauseQueue, PauseBizType:
		if err := CheckName("name", name); err != nil {
			return err
		}
	case PauseTopic:
		if err := CheckTopicPattern("name", name); err != nil {
			return err
		}
	default:
		return &Error{Code: CodeValidation, Message: fmt.Sprintf("kind must be one of %v", PauseKinds),
			Details: map[string]any{"field": "kind"}}
	}
	if len(reason) > MaxPauseReasonBytes || !utf8.ValidString(reason) || strings.ContainsFunc(reason, isControl) {
		return &Error{Code: CodeValidation, Message: fmt.Sprintf("reason must be UTF-8 text of at most %d bytes, without control characters other than newline and tab", MaxPauseReasonBytes),
			Details: map[string]any{"field": "reason"}}
	}
	return nil
}

func isControl(r rune) bool { return r != '\n' && r != '\t' && unicode.IsControl(r) }

// Pauses is the set of pauses in force at one moment: what the workers consult before they
// push, call back or publish.
type Pauses struct {
	named  map[PauseKind]map[string]Pause
	topics []Pause
}

// NewPauses indexes a list of pauses.
func NewPauses(list []Pause) Pauses {
	p := Pauses{named: map[PauseKind]map[string]Pause{}}
	for _, x := range list {
		if x.Kind == PauseTopic {
			p.topics = append(p.topics, x)
			continue
		}
		if p.named[x.Kind] == nil {
			p.named[x.Kind] = map[string]Pause{}
		}
		p.named[x.Kind][x.Name] = x
	}
	return p
}

// Queue returns the pause of a task queue, if it is paused.
func (p Pauses) Queue(name string) (Pause, bool) {
	x, ok := p.named[PauseQueue][name]
	return x, ok
}

// BizType returns the pause of a business type, if it is paused.
func (p Pauses) BizType(name string) (Pause, bool) {
	x, ok := p.named[PauseBizType][name]
	return x, ok
}

// Topic returns the pause whose pattern matches topic (the earliest, if several do).
func (p Pauses) Topic(topic string) (Pause, bool) {
	var found Pause
	ok := false
	for _, x := range p.topics {
		if MatchTopic(x.Name, topic) && (!ok || x.PausedAt.Before(found.PausedAt)) {
			found, ok = x, true
		}
	}
	return found, ok
}

// TopicPatterns returns the paused topic patterns.
func (p Pauses) TopicPatterns() []string {
	out := make([]string, len(p.topics))
	for i, x := range p.topics {
		out[i] = x.Name
	}
	return out
}

// All returns every pause, by kind then name.
func (p Pauses) All() []Pause {
	var out []Pause
	for _, m := range p.named {
		for _, x := range m {
			out = append(out, x)
		}
	}
	out = append(out, p.topics...)
	slices.SortFunc(out, func(a, b Pause) int {
		if a.Kind != b.Kind {
			return slices.Index(PauseKinds, a.Kind) - slices.Index(PauseKinds, b.Kind)
		}
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

// Len is the number of pauses in force.
func (p Pauses) Len() int {
	n := len(p.topics)
	for _, m := range p.named {
		n += len(m)
	}
	return n
}
