package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Load reads the file at path with the process environment: see LoadEnv.
func Load(path string) (*Config, error) {
	return LoadEnv(path, os.LookupEnv)
}

// LoadEnv reads the file at path and applies Parse with env as the environment (nil: none).
func LoadEnv(path string, env func(string) (string, bool)) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, env)
}

// Parse builds a Config from YAML: defaults, strict decode, HEARTBEATD_* overrides looked up with env
// (nil: no environment), *_file secrets, validation. Every problem is reported, joined with
// errors.Join, so a user fixes them in one go; only a file that does not decode stops early, since
// what follows would report nothing but its echoes.
func Parse(data []byte, env func(string) (string, bool)) (*Config, error) {
	cfg := Default()
	if err := decodeStrict(data, cfg); err != nil {
		return nil, err
	}
	var errs []error
	if env != nil {
		errs = append(errs, applyEnv(cfg, env))
	}
	applyDeprecated(cfg)
	if err := resolveNotifySecrets(cfg, env); err != nil {
		return nil, err // a secret written inline must not reach the messages below
	}
	errs = append(errs, readSecretFiles(cfg), readTokenFiles(cfg), cfg.Validate())
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return cfg, nil
}

// applyDeprecated carries a key still written under its old name to the new one, unless the new one was
// changed from its default too (Validate then reports the disagreement).
func applyDeprecated(cfg *Config) {
	if d := cfg.Detection.LagThreshold; d != nil && *d > 0 && cfg.Ingest.MaxLag == DefaultMaxLag {
		cfg.Ingest.MaxLag = *d
	}
}

// decodeStrict decodes the first YAML document of data into cfg with unknown keys as errors.
//
// yaml.v3's own unknown-field error names the Go type ("field qos_level not found in type
// config.MQTT"), so the node tree is walked first to name the key's full path and line as a user wrote
// them. The KnownFields decoder stays as the guarantee of strictness.
func decodeStrict(data []byte, cfg *Config) error {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if len(root.Content) == 0 {
		return nil // empty file: defaults only
	}
	var unknown []error
	findUnknownKeys(&root, reflect.TypeOf(cfg).Elem(), "", &unknown)
	if len(unknown) > 0 {
		return errors.Join(unknown...)
	}

	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			errs := make([]error, len(te.Errors))
			for i, e := range te.Errors {
				if strings.Contains(e, "into time.Duration") {
					e += " (a duration needs a unit, e.g. 30s, 5m, 1h30m)"
				}
				errs[i] = errors.New("config: " + e)
			}
			return errors.Join(errs...)
		}
		return fmt.Errorf("config: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		// A second document would otherwise be ignored without a word.
		return fmt.Errorf("config: line %d: more than one YAML document", extra.Line)
	}
	return nil
}

// findUnknownKeys reports every mapping key under n that has no field in t, with its dotted path.
func findUnknownKeys(n *yaml.Node, t reflect.Type, path string, errs *[]error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if decodesItself(t) {
		return // its own UnmarshalYAML reads the node, and the strict decoder checks its keys
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			findUnknownKeys(c, t, path, errs)
		}
	case yaml.AliasNode:
		if n.Alias != nil {
			findUnknownKeys(n.Alias, t, path, errs)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" || k.Value == "<<" {
				findUnknownKeys(v, t, path, errs) // merged mappings land in the same struct
				continue
			}
			switch t.Kind() {
			case reflect.Struct:
				f, ok := fieldByKey(t, k.Value)
				if !ok {
					msg := fmt.Sprintf("config: line %d: unknown key %s", k.Line, strconv.Quote(join(path, k.Value)))
					if s := suggest(k.Value, yamlKeys(t)); s != "" {
						msg += fmt.Sprintf(" (did you mean %q?)", s)
					}
					*errs = append(*errs, errors.New(msg))
					continue
				}
				findUnknownKeys(v, f.Type, join(path, k.Value), errs)
			case reflect.Map:
				findUnknownKeys(v, t.Elem(), join(path, k.Value), errs)
			}
		}
	case yaml.SequenceNode:
		if t.Kind() == reflect.Slice {
			for i, c := range n.Content {
				findUnknownKeys(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
			}
		}
	}
}

// selfDecoder is the UnmarshalYAML of yaml.v2, which Alertmanager's time interval types implement and
// yaml.v3 still calls.
type selfDecoder interface {
	UnmarshalYAML(unmarshal func(any) error) error
}

// decodesItself reports whether values of t parse their own YAML (time_intervals' ranges), so their
// keys are not fields of t.
func decodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return p.Implements(reflect.TypeFor[selfDecoder]()) || p.Implements(reflect.TypeFor[yaml.Unmarshaler]())
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// yamlName is a field's key, or "" for a field YAML does not see.
func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	if name == "" {
		return strings.ToLower(f.Name) // yaml.v3's default
	}
	return name
}

func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); yamlName(f) == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		if name := yamlName(t.Field(i)); name != "" {
			keys = append(keys, name)
		}
	}
	sort.Strings(keys)
	return keys
}

// suggest returns the known key closest to a misspelt one, if it is close enough to be the likely
// intent (edit distance ≤ 2, or a known key differing only in '-' versus '_').
func suggest(key string, known []string) string {
	best, bestDist := "", 3
	norm := strings.ReplaceAll(key, "-", "_")
	for _, k := range known {
		if k == norm {
			return k
		}
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
