package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Document is the task payload docparse understands:
//
//	{"name": "q3-report.txt", "text": "First page …\fSecond page …"}
//
// Pages are separated by form feeds (\f, the plain-text page break). Other fields are ignored.
type Document struct {
	Name string `json:"name"` // optional; echoed in the result
	Text string `json:"text"` // required, not blank
}

// Summary is what parsing a document yields: the result docparse reports to courier.
type Summary struct {
	Name       string `json:"name,omitempty"`
	Pages      int    `json:"pages"`      // form-feed separated parts that hold some text
	Words      int    `json:"words"`      // runs of non-space characters
	Characters int    `json:"characters"` // Unicode code points, spaces included
}

// ErrUnusablePayload marks a payload no retry can parse: docparse reports it as a failure with
// status code 422 instead of trying.
var ErrUnusablePayload = errors.New("unusable payload")

// DecodeDocument reads a task payload. Anything but a JSON object with a non-blank "text"
// string is an ErrUnusablePayload.
func DecodeDocument(payload json.RawMessage) (Document, error) {
	var d Document
	if err := json.Unmarshal(payload, &d); err != nil {
		return Document{}, fmt.Errorf("%w: want a JSON object with a \"text\" string: %v", ErrUnusablePayload, err)
	}
	if strings.TrimSpace(d.Text) == "" {
		return Document{}, fmt.Errorf("%w: \"text\" is missing or blank", ErrUnusablePayload)
	}
	return d, nil
}

// Parse counts the pages, words and characters of d.
func Parse(d Document) Summary {
	s := Summary{Name: d.Name, Words: len(strings.Fields(d.Text)), Characters: utf8.RuneCountInString(d.Text)}
	for page := range strings.SplitSeq(d.Text, "\f") {
		if strings.TrimSpace(page) != "" {
			s.Pages++
		}
	}
	return s
}
