package docs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/heartbeatd/heartbeatd/api"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// fence is one fenced code block of a page: its language and text.
type fence struct{ file, lang, text string }

var fenceRE = regexp.MustCompile("(?ms)^[ \t]*```([a-z]*)\n(.*?)^[ \t]*```")

func fences(t *testing.T) []fence {
	t.Helper()
	var out []fence
	for file, text := range docFiles(t) {
		for _, m := range fenceRE.FindAllStringSubmatch(text, -1) {
			out = append(out, fence{file: file, lang: m[1], text: m[2]})
		}
	}
	return out
}

// configKeys are the top-level keys of the configuration, from the reference config.
func configKeys(t *testing.T, ref map[string]any) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	for k := range ref {
		keys[k] = true
	}
	return keys
}

func referenceConfig(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "configs", "heartbeatd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ref map[string]any
	if err := yaml.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

// merge writes src over dst, map by map; anything else src sets replaces what dst has.
func merge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

var (
	// An inline snippet rooted at a top-level key: `redis.slots: 256`, `correlation: {by: [...]}`.
	inlineSnippet = regexp.MustCompile("`([a-z_]+(?:\\.[a-z_]+)*): ([^`]+)`")
)

// configSnippets are the configuration snippets of the pages as YAML documents: every fenced yaml block
// whose top-level keys include a configuration key, and every inline `path.to.key: value` whose first
// segment is one.
func configSnippets(t *testing.T, keys map[string]bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range fences(t) {
		if f.lang != "yaml" {
			continue
		}
		var top map[string]any
		if err := yaml.Unmarshal([]byte(f.text), &top); err != nil {
			t.Errorf("%s: a yaml block that is not YAML: %v\n%s", f.file, err, f.text)
			continue
		}
		for k := range top {
			if keys[k] {
				out[f.file+": "+strings.SplitN(f.text, "\n", 2)[0]+" …"] = f.text
				break
			}
		}
	}
	for file, text := range docFiles(t) {
		for _, m := range inlineSnippet.FindAllStringSubmatch(text, -1) {
			path := strings.Split(m[1], ".")
			if !keys[path[0]] {
				continue
			}
			doc := m[2]
			for i := len(path) - 1; i >= 0; i-- {
				doc = "{" + path[i] + ": " + doc + "}"
			}
			out[file+": "+m[0]] = doc
		}
	}
	return out
}

// Every configuration snippet the docs show is accepted by the config loader, merged onto the reference
// configuration as an operator would paste it: no unknown key, no value check-config rejects.
func TestDocsConfigSnippetsLoad(t *testing.T) {
	keys := configKeys(t, referenceConfig(t))
	snippets := configSnippets(t, keys)
	// Fewer means the patterns no longer find the snippets, not that the docs lost them.
	if len(snippets) < 6 {
		t.Fatalf("found only %d config snippets: %v", len(snippets), snippets)
	}
	for where, doc := range snippets {
		var snippet map[string]any
		if err := yaml.Unmarshal([]byte(doc), &snippet); err != nil {
			t.Errorf("%s: not YAML: %v", where, err)
			continue
		}
		ref := referenceConfig(t)
		merge(ref, snippet)
		b, err := yaml.Marshal(ref)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := config.Parse(b, docsEnv); err != nil {
			t.Errorf("%s: rejected merged onto configs/heartbeatd.yaml:\n%v", where, err)
		}
	}
}

// docsEnv stands in for the environment of a snippet that reads a secret as "${NAME}" (the notify
// receivers'): every such variable is set, to a URL, which every secret accepts.
func docsEnv(name string) (string, bool) {
	if strings.HasPrefix(name, config.EnvPrefix+"_") {
		return "", false
	}
	return "https://stand-in.example/secret", true
}

// kinds are the event kinds pkg/event declares.
func kinds(t *testing.T) map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^\s*(?:const\s+)?[A-Z][A-Za-z]*\s+Kind\s*=\s*"([a-z_]+)"`)
	out := map[string]bool{}
	for _, src := range goSources(t, "pkg/event") {
		for _, m := range decl.FindAllStringSubmatch(src, -1) {
			out[m[1]] = true
		}
	}
	if len(out) < 10 {
		t.Fatalf("found only %d event kinds in pkg/event: the pattern no longer reads the code", len(out))
	}
	return out
}

var (
	// A kind named in prose or an example: `kind: watchdog`, "kind":"interrupted", ce_type=heartbeatd.x.
	kindMention = regexp.MustCompile(`kind: ([a-z_]+)|"kind":\s*"([a-z_]+)"|ce_type=heartbeatd\.([a-z_]+)`)
	// A table of kinds: its header's first cell is "kind"; each row's first cell names kinds in backticks.
	kindTable  = regexp.MustCompile("(?m)^\\| kind \\|.*\n\\|[-| ]+\\|\n((?:\\|.*\n)+)")
	backticked = regexp.MustCompile("`([^`]+)`")
)

// Every event kind the docs name exists in pkg/event, and the kind tables of docs/events.md and
// README.md name every kind there is.
func TestDocsNameOnlyRealEventKinds(t *testing.T) {
	real := kinds(t)
	var unknown []string
	tables := map[string]map[string]bool{}
	for file, text := range docFiles(t) {
		for _, m := range kindMention.FindAllStringSubmatch(text, -1) {
			if k := m[1] + m[2] + m[3]; !real[k] {
				unknown = append(unknown, file+": "+m[0])
			}
		}
		for _, table := range kindTable.FindAllStringSubmatch(text, -1) {
			if tables[file] == nil {
				tables[file] = map[string]bool{}
			}
			for _, row := range strings.Split(strings.TrimSpace(table[1]), "\n") {
				first := strings.SplitN(strings.TrimPrefix(row, "|"), "|", 2)[0]
				for _, k := range backticked.FindAllStringSubmatch(first, -1) {
					tables[file][k[1]] = true
					if !real[k[1]] {
						unknown = append(unknown, file+": kind table row "+k[0])
					}
				}
			}
		}
	}
	failWithAll(t, "the docs name event kinds pkg/event does not have", unknown)
	for _, file := range []string{"events.md", "README.md"} {
		for k := range real {
			if !tables[file][k] {
				t.Errorf("%s: the kind table does not name %q", file, k)
			}
		}
	}
}

// Every example event in a json block validates against api/event.schema.json, and its id is the one
// heartbeatd gives that event: device/<deadline Unix ms>/kind/repeat (watchdog/<replica>/<at Unix ms>).
func TestDocsExampleEventsValidate(t *testing.T) {
	found := 0
	for _, f := range fences(t) {
		if f.lang != "json" {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(f.text))
		for {
			var raw json.RawMessage
			err := dec.Decode(&raw)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Errorf("%s: a json block that is not JSON: %v\n%s", f.file, err, f.text)
				break
			}
			if !bytes.Contains(raw, []byte(`"schema":"`+event.Schema+`"`)) {
				continue
			}
			found++
			if err := api.ValidateEvent(raw); err != nil {
				t.Errorf("%s: example event breaks api/event.schema.json: %v\n%s", f.file, err, raw)
				continue
			}
			e, err := event.Decode(raw)
			if err != nil {
				t.Errorf("%s: %v\n%s", f.file, err, raw)
				continue
			}
			want := event.ID(e.DeviceID, e.Deadline, e.Kind, e.Repeat)
			if e.Kind == event.Watchdog {
				want = event.WatchdogID(e.DeviceID, e.At)
			}
			if e.ID != want {
				t.Errorf("%s: example event id %q does not match its fields: heartbeatd would give it %q", f.file, e.ID, want)
			}
		}
	}
	if found < 2 {
		t.Fatalf("found %d example events in json blocks; README.md and docs/events.md each show one", found)
	}
}

// The reasons POST /v1/signals lists its bad signals by are the dead-letter reasons of
// api/deadletter.schema.json, plus outside_scope (docs/http-api.md#signals): the two enums cannot drift.
func TestSignalsAnswerNamesEveryDeadLetterReason(t *testing.T) {
	read := func(name string, v any) {
		t.Helper()
		b, err := api.Files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, v); err != nil { // JSON is YAML
			t.Fatalf("%s: %v", name, err)
		}
	}
	var deadLetter struct {
		Properties struct {
			Reason struct {
				Enum []string `yaml:"enum"`
			} `yaml:"reason"`
		} `yaml:"properties"`
	}
	read(api.DeadLetterSchema, &deadLetter)
	var openapi struct {
		Paths map[string]struct {
			Post struct {
				Responses map[string]struct {
					Content map[string]struct {
						Schema struct {
							Properties struct {
								Bad struct {
									Items struct {
										Properties struct {
											Reason struct {
												Enum []string `yaml:"enum"`
											} `yaml:"reason"`
										} `yaml:"properties"`
									} `yaml:"items"`
								} `yaml:"bad"`
							} `yaml:"properties"`
						} `yaml:"schema"`
					} `yaml:"content"`
				} `yaml:"responses"`
			} `yaml:"post"`
		} `yaml:"paths"`
	}
	read("openapi.yaml", &openapi)
	want := append(slices.Clone(deadLetter.Properties.Reason.Enum), "outside_scope")
	got := openapi.Paths["/v1/signals"].Post.Responses["200"].Content["application/json"].Schema.Properties.Bad.Items.Properties.Reason.Enum
	if len(deadLetter.Properties.Reason.Enum) == 0 || len(got) == 0 {
		t.Fatalf("found no reason enum: dead letters %v, POST /v1/signals %v", deadLetter.Properties.Reason.Enum, got)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("api/openapi.yaml: POST /v1/signals bad[].reason is %v, want the dead-letter reasons and outside_scope %v", got, want)
	}
}
