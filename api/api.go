// Package api holds heartbeatd's published contracts, the files a consumer reads in this directory:
//
//   - event.schema.json: an events-topic message value (JSON Schema 2020-12)
//   - event-headers.schema.json: its Kafka headers (CloudEvents 1.0, binary content mode)
//   - deadletter.schema.json: a dead-letter-topic message value
//   - signal.schema.json: a signal's payload in its JSON form
//   - asyncapi.yaml: the topics heartbeatd reads and writes (AsyncAPI 3)
//   - openapi.yaml: the HTTP API (OpenAPI 3.1)
//
// A Go consumer validates a message with ValidateEvent and ValidateDeadLetter. heartbeatd's own tests
// run the Closed variants on every message they read, so the code cannot write what the schemas do not say.
package api

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

// Files are the documents of this directory.
//
//go:embed *.json *.yaml
var Files embed.FS

// BaseURL is where the documents' $id and $ref URLs point: this directory in the repository.
const BaseURL = "https://github.com/heartbeatd/heartbeatd/api/"

// The schema documents.
const (
	EventSchema       = "event.schema.json"
	EventHeaderSchema = "event-headers.schema.json"
	DeadLetterSchema  = "deadletter.schema.json"
	SignalSchema      = "signal.schema.json"
)

// ValidateEvent checks an events-topic message value against event.schema.json. Fields the schema does
// not declare are allowed: fields may be added within v1, and consumers ignore those they do not know.
func ValidateEvent(value []byte) error { return validate(EventSchema, false, value) }

// ValidateEventClosed is ValidateEvent that also rejects a top-level field the schema does not declare.
func ValidateEventClosed(value []byte) error { return validate(EventSchema, true, value) }

// ValidateDeadLetter checks a dead-letter-topic message value against deadletter.schema.json; fields the
// schema does not declare are allowed.
func ValidateDeadLetter(value []byte) error { return validate(DeadLetterSchema, false, value) }

// ValidateDeadLetterClosed is ValidateDeadLetter that also rejects a top-level field the schema does not
// declare.
func ValidateDeadLetterClosed(value []byte) error { return validate(DeadLetterSchema, true, value) }

// ValidateEventHeaders checks an event message's Kafka headers (name → value) against
// event-headers.schema.json, and that they agree with the message value: ce_id is its id, ce_type
// heartbeatd.<kind> and ce_time its at.
func ValidateEventHeaders(headers map[string]string, value []byte) error {
	doc := make(map[string]any, len(headers))
	for k, v := range headers {
		doc[k] = v
	}
	if err := validateDoc(EventHeaderSchema, false, doc); err != nil {
		return err
	}
	var e struct {
		ID   string `json:"id"`
		Kind string `json:"kind"`
		At   string `json:"at"`
	}
	if err := json.Unmarshal(value, &e); err != nil {
		return fmt.Errorf("api: event headers: value: %w", err)
	}
	for _, c := range []struct{ header, want string }{
		{"ce_id", e.ID}, {"ce_type", "heartbeatd." + e.Kind}, {"ce_time", e.At},
	} {
		if got := headers[c.header]; got != c.want {
			return fmt.Errorf("api: event headers: %s is %q, the value says %q", c.header, got, c.want)
		}
	}
	return nil
}

// validate parses value and checks it against the schema document name.
func validate(name string, closed bool, value []byte) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(value))
	if err != nil {
		return fmt.Errorf("api: %s: not JSON: %w", name, err)
	}
	return validateDoc(name, closed, doc)
}

func validateDoc(name string, closed bool, doc any) error {
	s, err := compiled()
	if err != nil {
		return err
	}
	sch := s.schemas[name]
	if sch == nil {
		return fmt.Errorf("api: no schema %s", name)
	}
	if err := sch.Validate(doc); err != nil {
		return fmt.Errorf("api: %s: %w", name, err)
	}
	if obj, ok := doc.(map[string]any); ok && closed {
		// Every field a schema allows is declared in its top-level properties (its per-kind branches
		// only constrain them), so closed is "no key outside properties": next to nothing, where
		// unevaluatedProperties: false would evaluate the whole schema a second time.
		for k := range obj {
			if !s.declared[name][k] {
				return fmt.Errorf("api: %s: field %q is not declared by the schema", name, k)
			}
		}
	}
	return nil
}

// compiledSchemas are the schema documents, compiled, with the fields each declares.
type compiledSchemas struct {
	schemas  map[string]*jsonschema.Schema
	declared map[string]map[string]bool
}

// compiled compiles the schemas once, on first use: a program that only reads Files pays nothing.
var compiled = sync.OnceValues(func() (*compiledSchemas, error) {
	c, err := Compiler()
	if err != nil {
		return nil, err
	}
	s := &compiledSchemas{schemas: map[string]*jsonschema.Schema{}, declared: map[string]map[string]bool{}}
	for _, name := range []string{EventSchema, EventHeaderSchema, DeadLetterSchema, SignalSchema} {
		if s.schemas[name], err = c.Compile(BaseURL + name); err != nil {
			return nil, fmt.Errorf("api: compile %s: %w", name, err)
		}
		doc, err := Document(name)
		if err != nil {
			return nil, err
		}
		props, _ := doc.(map[string]any)["properties"].(map[string]any)
		s.declared[name] = map[string]bool{}
		for k := range props {
			s.declared[name][k] = true
		}
	}
	return s, nil
})

// Document returns the document name of Files as JSON values (map[string]any, []any, string,
// json.Number, bool, nil), the YAML ones included.
func Document(name string) (any, error) {
	b, err := Files.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	if strings.HasSuffix(name, ".yaml") {
		// Through JSON, so a YAML document is what its JSON form would be (a mapping with a non-string
		// key, such as an unquoted status code, fails here instead of in the validator).
		var v any
		if err := yaml.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("api: %s: %w", name, err)
		}
		if b, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("api: %s: %w", name, err)
		}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("api: %s: %w", name, err)
	}
	return doc, nil
}

// Compiler returns a JSON Schema compiler that knows every document of Files under BaseURL, so a schema
// inside asyncapi.yaml or openapi.yaml compiles by its URL (BaseURL + "openapi.yaml#/components/…") and
// its relative $refs resolve. It asserts formats (date-time) and content encodings (base64) and defaults
// to draft 2020-12, which OpenAPI 3.1 and these AsyncAPI schemas use.
func Compiler() (*jsonschema.Compiler, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.AssertContent()
	entries, err := Files.ReadDir(".")
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	for _, e := range entries {
		doc, err := Document(e.Name())
		if err != nil {
			return nil, err
		}
		if err := c.AddResource(BaseURL+e.Name(), doc); err != nil {
			return nil, fmt.Errorf("api: %s: %w", e.Name(), err)
		}
	}
	return c, nil
}
