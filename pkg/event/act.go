package event

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Act is who performed an operator's act (ack, silence, unsilence, delete) and why; its event carries
// both in By and Note when given (docs/events.md).
type Act struct {
	By   string `json:"by,omitempty"`
	Note string `json:"note,omitempty"`
	// Token is the name of the API token that acted, when By names someone else (docs/access.md).
	Token string `json:"token,omitempty"`
}

// The bounds of an act's by and note, so an act cannot grow an event past what Kafka takes.
const (
	MaxActBy   = 256
	MaxActNote = 1024
)

// ErrInvalidAct is wrapped by Act.Validate.
var ErrInvalidAct = errors.New("invalid act")

// Validate checks the bounds of by and note and that both are UTF-8 text.
func (a Act) Validate() error {
	switch {
	case len(a.By) > MaxActBy:
		return fmt.Errorf("%w: by is at most %d bytes", ErrInvalidAct, MaxActBy)
	case len(a.Note) > MaxActNote:
		return fmt.Errorf("%w: note is at most %d bytes", ErrInvalidAct, MaxActNote)
	case !utf8.ValidString(a.By) || !utf8.ValidString(a.Note):
		return fmt.Errorf("%w: by and note must be UTF-8", ErrInvalidAct)
	}
	return nil
}
