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
	// Token is the name of the API token that acted (docs/access.md#the-audit-trail). The API sets it from
	// the bearer token presented, never from the request.
	Token string `json:"token,omitempty"`
}

// The bounds of an act's by and note, in bytes: every replica keeps an act's event in its event ring and
// each live stream's queue, and Kafka refuses an event over its message size (1 MiB by default), which
// would leave an act without its audit record. By is a name (a token's is at most 64 bytes).
const (
	MaxActBy   = 128
	MaxActNote = 1024
)

// ErrInvalidAct is wrapped by Act.Validate.
var ErrInvalidAct = errors.New("invalid act")

// Validate checks the bounds of by and note and that both are UTF-8 text. (The API also refuses a by with
// control or invisible format characters, by the ids' rule.)
func (a Act) Validate() error {
	switch {
	case len(a.By) > MaxActBy:
		return fmt.Errorf("%w: by is %d bytes, at most %d", ErrInvalidAct, len(a.By), MaxActBy)
	case len(a.Note) > MaxActNote:
		return fmt.Errorf("%w: note is %d bytes, at most %d", ErrInvalidAct, len(a.Note), MaxActNote)
	case !utf8.ValidString(a.By) || !utf8.ValidString(a.Note):
		return fmt.Errorf("%w: by and note must be UTF-8", ErrInvalidAct)
	}
	return nil
}
