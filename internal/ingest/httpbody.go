package ingest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Limits of one HTTP signal batch (docs/http-api.md#signals).
const (
	MaxBatchSignals = 10000
	MaxBatchBytes   = 8 << 20
)

// ErrTooManySignals is a batch with more than its limit of signals; nothing of it is submitted.
var ErrTooManySignals = errors.New("ingest: too many signals in one request")

// Batch is an HTTP body cut into its signals: each one's bytes, in order, in one buffer, so a batch costs
// its body's size and two ints a signal. The framing only finds where each signal ends; what a signal
// says is read by decode, as for every other source.
type Batch struct {
	buf  []byte
	ends []int // ends[i] is where signal i ends in buf; it starts where i-1 ended
}

// Len is the number of signals.
func (b *Batch) Len() int { return len(b.ends) }

// Signal is the bytes of signal i.
func (b *Batch) Signal(i int) []byte {
	start := 0
	if i > 0 {
		start = b.ends[i-1]
	}
	return b.buf[start:b.ends[i]]
}

// ReadBatch cuts body into signals: a JSON array of objects when its first non-space byte is '[', else
// NDJSON (one object a line; blank lines are skipped). An array's elements are cut at the commas
// between them, outside strings and nesting, so an element that is not valid JSON spoils only itself
// (and at worst those its broken quoting swallows), never the whole array. A signal longer than
// MaxPayload keeps its first MaxPayload+1 bytes, enough for decode to call it oversize. More than
// maxSignals signals is ErrTooManySignals, read no further; the reader's own error (a body over its
// limit, a client gone) is returned as is.
func ReadBatch(body io.Reader, maxSignals int) (*Batch, error) {
	r := bufio.NewReaderSize(body, 64<<10)
	b := &Batch{}
	first, err := skipSpace(r)
	if errors.Is(err, io.EOF) {
		return b, nil
	}
	if err != nil {
		return nil, err
	}
	if first == '[' {
		_, _ = r.ReadByte()
		err = b.readArray(r, maxSignals)
	} else {
		err = b.readLines(r, maxSignals)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// add ends the signal being collected (the bytes appended since the last end), trimmed of white space;
// an empty one is kept only when keepEmpty (an array's empty element is bad input, a blank line is not).
func (b *Batch) add(start int, keepEmpty bool, maxSignals int) error {
	s := bytes.TrimSpace(b.buf[start:])
	if len(s) == 0 && !keepEmpty {
		b.buf = b.buf[:start]
		return nil
	}
	n := copy(b.buf[start:], s)
	b.buf = b.buf[:start+n]
	if len(b.ends) == maxSignals {
		return fmt.Errorf("%w: more than %d", ErrTooManySignals, maxSignals)
	}
	b.ends = append(b.ends, len(b.buf))
	return nil
}

// appendCapped appends p to the signal begun at start, keeping at most MaxPayload+1 of its bytes.
func (b *Batch) appendCapped(start int, p []byte) {
	if room := MaxPayload + 1 - (len(b.buf) - start); room < len(p) {
		p = p[:max(room, 0)]
	}
	b.buf = append(b.buf, p...)
}

func (b *Batch) readLines(r *bufio.Reader, maxSignals int) error {
	for {
		start := len(b.buf)
		var err error
		for {
			var line []byte
			line, err = r.ReadSlice('\n')
			b.appendCapped(start, line)
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if aerr := b.add(start, false, maxSignals); aerr != nil {
			return aerr
		}
		if err != nil {
			return nil
		}
	}
}

// readArray reads the elements after the opening '['. Whatever follows the closing ']' other than white
// space is one more (malformed) element; an array that is not closed keeps its elements.
func (b *Batch) readArray(r *bufio.Reader, maxSignals int) error {
	if c, err := skipSpace(r); err == nil && c == ']' {
		_, _ = r.ReadByte()
		return b.readTrailer(r, maxSignals)
	}
	for {
		start := len(b.buf)
		end, err := b.readElement(r, start)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if errors.Is(err, io.EOF) && len(bytes.TrimSpace(b.buf[start:])) == 0 {
			b.buf = b.buf[:start]
			return nil // "[a," then the end: the elements before are whole
		}
		if aerr := b.add(start, true, maxSignals); aerr != nil {
			return aerr
		}
		switch {
		case err != nil:
			return nil
		case end == ']':
			return b.readTrailer(r, maxSignals)
		}
	}
}

// readElement appends one array element and returns the byte that ended it, ',' or ']'. It scans what
// the reader holds a chunk at a time, so an element costs a copy, not a call per byte.
func (b *Batch) readElement(r *bufio.Reader, start int) (byte, error) {
	depth, inString, escaped := 0, false, false
	for {
		chunk, err := r.Peek(max(r.Buffered(), 1))
		if len(chunk) == 0 {
			return 0, err
		}
		for i, c := range chunk {
			switch {
			case inString:
				switch {
				case escaped:
					escaped = false
				case c == '\\':
					escaped = true
				case c == '"':
					inString = false
				}
			case c == '"':
				inString = true
			case c == '{' || c == '[':
				depth++
			case (c == ',' || c == ']') && depth <= 0:
				b.appendCapped(start, chunk[:i])
				_, _ = r.Discard(i + 1)
				return c, nil
			case c == '}' || c == ']':
				depth--
			}
		}
		b.appendCapped(start, chunk)
		_, _ = r.Discard(len(chunk))
	}
}

// readTrailer reads what follows the array's ']': white space, or one more element that is bad input.
func (b *Batch) readTrailer(r *bufio.Reader, maxSignals int) error {
	start := len(b.buf)
	for {
		chunk, err := r.ReadSlice('\n')
		b.appendCapped(start, chunk)
		if errors.Is(err, io.EOF) {
			return b.add(start, false, maxSignals)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

// skipSpace skips JSON white space and returns the next byte without consuming it.
func skipSpace(r *bufio.Reader) (byte, error) {
	for {
		c, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c, r.UnreadByte()
	}
}
