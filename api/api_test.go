package api_test

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/api"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

func document(t *testing.T, name string) map[string]any {
	t.Helper()
	doc, err := api.Document(name)
	require.NoError(t, err)
	m, ok := doc.(map[string]any)
	require.True(t, ok, "%s is an object", name)
	return m
}

// get walks a decoded document along keys.
func get(t *testing.T, v any, keys ...string) any {
	t.Helper()
	for i, k := range keys {
		m, ok := v.(map[string]any)
		require.True(t, ok, "%s is an object", strings.Join(keys[:i], "/"))
		v, ok = m[k]
		require.True(t, ok, "%s is missing", strings.Join(keys[:i+1], "/"))
	}
	return v
}

func compile(t *testing.T, c *jsonschema.Compiler, url string) *jsonschema.Schema {
	t.Helper()
	s, err := c.Compile(url)
	require.NoError(t, err, url)
	return s
}

// pointer escapes a JSON Pointer token.
func pointer(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

// Every schema compiles and its own examples are valid.
func TestSchemasAcceptTheirExamples(t *testing.T) {
	c, err := api.Compiler()
	require.NoError(t, err)
	for _, name := range []string{api.EventSchema, api.EventHeaderSchema, api.DeadLetterSchema, api.SignalSchema} {
		t.Run(name, func(t *testing.T) {
			doc := document(t, name)
			require.Equal(t, api.BaseURL+name, doc["$id"])
			require.Equal(t, "https://json-schema.org/draft/2020-12/schema", doc["$schema"])
			s := compile(t, c, api.BaseURL+name)
			examples, _ := doc["examples"].([]any)
			require.NotEmpty(t, examples)
			for i, ex := range examples {
				require.NoError(t, s.Validate(ex), "example %d", i)
			}
		})
	}
}

// The schemas say no for what the code never writes, so validating what it writes means something.
func TestSchemasRejectWhatTheContractForbids(t *testing.T) {
	valid := map[string]any{
		"schema": "heartbeatd.event/v1", "id": "dev-42/1795341630000/alarm/2", "kind": "alarm",
		"device_id": "dev-42", "device_type": "gateway", "last_seen": "2026-11-22T10:00:00Z",
		"deadline": "2026-11-22T10:00:30Z", "at": "2026-11-22T10:10:30.4Z", "silent_for_ms": 630400, "repeat": 2,
	}
	with := func(changes map[string]any) []byte {
		m := map[string]any{}
		for k, v := range valid {
			m[k] = v
		}
		for k, v := range changes {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return b
	}
	require.NoError(t, api.ValidateEventClosed(with(nil)))
	require.NoError(t, api.ValidateEvent(with(map[string]any{"added_later": 1})), "open: fields may be added within v1")
	require.Error(t, api.ValidateEventClosed(with(map[string]any{"added_later": 1})), "closed: only declared fields")
	require.NoError(t, api.ValidateEventClosed(with(map[string]any{"last_seen": json.RawMessage("null")})))
	for name, changes := range map[string]map[string]any{
		"other schema":            {"schema": "heartbeatd.event/v2"},
		"unknown kind":            {"kind": "muted"},
		"no id":                   {"id": nil},
		"empty device":            {"device_id": ""},
		"alarm with repeat 0":     {"repeat": 0},
		"id of another kind":      {"id": "dev-42/1795341630000/interrupted/2"},
		"time with zone":          {"at": "2026-11-22T11:10:30+01:00"},
		"time in microseconds":    {"at": "2026-11-22T10:10:30.000001Z"},
		"not a time":              {"at": "yesterday"},
		"null at":                 {"at": json.RawMessage("null")},
		"negative silence":        {"silent_for_ms": -1},
		"detection without times": {"deadline": nil},
		"interrupted repeat 1":    {"kind": "interrupted", "id": "dev-42/1/interrupted/0", "repeat": 1},
		"outage without group":    {"kind": "outage_started", "device_id": "outage:site:x", "outage_id": "o", "count": 1, "sample": []string{}},
		"suppressed, no parent":   {"kind": "suppressed", "id": "dev-42/1/suppressed/0", "repeat": 0},
		"degraded not a boolean":  {"degraded": "yes"},
	} {
		require.Error(t, api.ValidateEvent(with(changes)), name)
	}

	require.NoError(t, api.ValidateDeadLetterClosed([]byte(`{"reason":"oversize","source":"mqtt","topic":"t",`+
		`"payload_b64":"YQ==","payload_size":70000,"payload_truncated":true,"at":"1970-01-01T00:00:00Z"}`)))
	for name, dl := range map[string]string{
		"unknown reason":          `{"reason":"odd","source":"mqtt","topic":"t","payload_b64":"","at":"1970-01-01T00:00:00Z"}`,
		"unknown source":          `{"reason":"oversize","source":"smtp","topic":"t","payload_b64":"","at":"1970-01-01T00:00:00Z"}`,
		"not base64":              `{"reason":"oversize","source":"mqtt","topic":"t","payload_b64":"%%%","at":"1970-01-01T00:00:00Z"}`,
		"truncated without size":  `{"reason":"oversize","source":"mqtt","topic":"t","payload_b64":"","payload_truncated":true,"at":"1970-01-01T00:00:00Z"}`,
		"key size without key":    `{"reason":"oversize","source":"kafka","topic":"t","payload_b64":"","key_size":2000,"key_truncated":true,"at":"1970-01-01T00:00:00Z"}`,
		"size of an uncut key":    `{"reason":"oversize","source":"kafka","topic":"t","key_b64":"YQ==","payload_b64":"","key_size":1,"key_truncated":true,"at":"1970-01-01T00:00:00Z"}`,
		"no time":                 `{"reason":"oversize","source":"mqtt","topic":"t","payload_b64":""}`,
		"payload longer than cut": `{"reason":"oversize","source":"mqtt","topic":"t","payload_b64":"` + strings.Repeat("A", 87388) + `","at":"1970-01-01T00:00:00Z"}`,
	} {
		require.Error(t, api.ValidateDeadLetter([]byte(dl)), name)
	}
}

// The schemas' lists match the code's: every kind pkg/event knows is in the event schema, and the
// dead-letter reasons are exactly ingest's.
func TestSchemaListsMatchTheCode(t *testing.T) {
	kinds := get(t, document(t, api.EventSchema), "properties", "kind", "enum").([]any)
	for _, k := range []event.Kind{event.Interrupted, event.Alarm, event.Recovered, event.Exhausted, event.Watchdog} {
		require.Contains(t, kinds, string(k))
	}
	var reasons []string
	for _, r := range get(t, document(t, api.DeadLetterSchema), "properties", "reason", "enum").([]any) {
		reasons = append(reasons, r.(string))
	}
	require.ElementsMatch(t, ingest.Reasons, reasons)
	require.Equal(t, json.Number(strconv.Itoa(event.MaxDeadLetterKey)), get(t, document(t, api.DeadLetterSchema), "properties", "key_size", "exclusiveMinimum"))
	require.Equal(t, json.Number(strconv.Itoa(event.MaxDeadLetterPayload)), get(t, document(t, api.DeadLetterSchema), "properties", "payload_size", "exclusiveMinimum"))
}

// The closed check reads only the top-level properties: a per-kind branch that declared a field of its
// own would make a valid event fail it.
func TestSchemaBranchesDeclareNoFieldsOfTheirOwn(t *testing.T) {
	for _, name := range []string{api.EventSchema, api.DeadLetterSchema} {
		doc := document(t, name)
		props := doc["properties"].(map[string]any)
		branches, _ := doc["allOf"].([]any)
		for i, b := range branches {
			for _, part := range []string{"if", "then", "else"} {
				sub, _ := b.(map[string]any)[part].(map[string]any)
				subProps, _ := sub["properties"].(map[string]any)
				for k := range subProps {
					require.Contains(t, props, k, "%s: allOf/%d/%s", name, i, part)
				}
				required, _ := sub["required"].([]any)
				for _, k := range required {
					require.Contains(t, props, k.(string), "%s: allOf/%d/%s", name, i, part)
				}
			}
		}
	}
}

// The AsyncAPI document's references resolve, its examples are valid messages, and its addresses are
// the configuration's defaults.
func TestAsyncAPI(t *testing.T) {
	const name = "asyncapi.yaml"
	doc := document(t, name)
	require.Equal(t, "3.0.0", doc["asyncapi"])
	c, err := api.Compiler()
	require.NoError(t, err)

	messages := get(t, doc, "components", "messages").(map[string]any)
	for msgName, m := range messages {
		t.Run(msgName, func(t *testing.T) {
			base := api.BaseURL + name + "#/components/messages/" + pointer(msgName)
			payload := compile(t, c, base+"/payload")
			var headers *jsonschema.Schema
			if _, ok := m.(map[string]any)["headers"]; ok {
				headers = compile(t, c, base+"/headers")
			}
			examples, _ := m.(map[string]any)["examples"].([]any)
			for i, ex := range examples {
				ex := ex.(map[string]any)
				require.NoError(t, payload.Validate(ex["payload"]), "example %d", i)
				if h, ok := ex["headers"]; ok {
					require.NotNil(t, headers, "example %d has headers, the message none", i)
					require.NoError(t, headers.Validate(h), "example %d", i)
				}
				if msgName != "event" {
					continue
				}
				value, err := json.Marshal(ex["payload"])
				require.NoError(t, err)
				require.NoError(t, api.ValidateEventClosed(value), "example %d", i)
				hs := map[string]string{}
				for k, v := range ex["headers"].(map[string]any) {
					hs[k] = v.(string)
				}
				require.NoError(t, api.ValidateEventHeaders(hs, value), "example %d", i)
			}
		})
	}

	// Every channel's messages and every operation's channel resolve to a part of the document.
	for chName, ch := range get(t, doc, "channels").(map[string]any) {
		for _, m := range ch.(map[string]any)["messages"].(map[string]any) {
			ref := m.(map[string]any)["$ref"].(string)
			require.True(t, strings.HasPrefix(ref, "#/components/messages/"), ref)
			require.Contains(t, messages, strings.TrimPrefix(ref, "#/components/messages/"), "channel %s", chName)
		}
	}
	for opName, op := range get(t, doc, "operations").(map[string]any) {
		ref := get(t, op, "channel", "$ref").(string)
		chName := strings.TrimPrefix(ref, "#/channels/")
		ch := get(t, doc, "channels", chName)
		for _, m := range op.(map[string]any)["messages"].([]any) {
			mref := m.(map[string]any)["$ref"].(string)
			require.True(t, strings.HasPrefix(mref, ref+"/messages/"), "operation %s: %s", opName, mref)
			get(t, ch, "messages", strings.TrimPrefix(mref, ref+"/messages/"))
		}
	}

	def := config.Default()
	require.Equal(t, def.Events.Kafka.Topic, get(t, doc, "channels", "events", "address"))
	require.Equal(t, def.Events.Kafka.DeadletterTopic, get(t, doc, "channels", "deadletter", "address"))
	require.Equal(t, def.Ingest.Kafka.Topics[0], get(t, doc, "channels", "kafkaSignals", "address"))
	var mqtt []string
	for _, s := range def.Ingest.MQTT.Subscriptions {
		mqtt = append(mqtt, s.Topic)
	}
	require.True(t, slices.Contains(mqtt, get(t, doc, "channels", "mqttHeartbeat", "address").(string)))
	require.True(t, slices.Contains(mqtt, get(t, doc, "channels", "mqttTelemetry", "address").(string)))
	require.Equal(t, def.Ingest.MQTT.Probe.Topic, get(t, doc, "channels", "mqttProbe", "address"))
}

// The headers must agree with the value they travel with.
func TestValidateEventHeaders(t *testing.T) {
	value := []byte(`{"schema":"heartbeatd.event/v1","id":"d/1/alarm/1","kind":"alarm","device_id":"d",` +
		`"device_type":"","last_seen":null,"deadline":"1970-01-01T00:00:00.001Z","at":"2026-01-02T03:04:05.6Z",` +
		`"silent_for_ms":0,"repeat":1}`)
	require.NoError(t, api.ValidateEventClosed(value))
	good := map[string]string{"ce_specversion": "1.0", "ce_id": "d/1/alarm/1", "ce_type": "heartbeatd.alarm",
		"ce_source": "/heartbeatd/hb", "ce_time": "2026-01-02T03:04:05.6Z", "content-type": "application/json"}
	require.NoError(t, api.ValidateEventHeaders(good, value))
	for header, bad := range map[string]string{
		"ce_specversion": "0.3", "ce_id": "d/1/alarm/2", "ce_type": "heartbeatd.recovered",
		"ce_source": "heartbeatd", "ce_time": "2026-01-02T03:04:05.600Z", "content-type": "text/plain",
	} {
		h := map[string]string{}
		for k, v := range good {
			h[k] = v
		}
		h[header] = bad
		require.Error(t, api.ValidateEventHeaders(h, value), header)
		delete(h, header)
		require.Error(t, api.ValidateEventHeaders(h, value), "without "+header)
	}
}
