package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func TestReferenceConfigs(t *testing.T) {
	// compose.yaml reads the secrets docker-compose.yml mounts (TestComposeConfigNeedsItsSecrets).
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("stand-in-for-a-mounted-secret\n"), 0o600))
	env := map[string]map[string]string{"compose.yaml": {"HEARTBEATD_HTTP_TOKEN_FILE": secret, "HEARTBEATD_INGEST_MQTT_PASSWORD_FILE": secret}}
	for _, name := range []string{"heartbeatd.yaml", "dev.yaml", "compose.yaml"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadEnv(filepath.Join("..", "..", "configs", name), envMap(env[name]))
			require.NoError(t, err)
			assert.Contains(t, cfg.Types, "default")
		})
	}

	path := filepath.Join("..", "..", "configs", "heartbeatd.yaml")
	ref, err := LoadEnv(path, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"types", "time_intervals"}, ChangedKeys(Default(), ref), "reference values differ from Default()")

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var root yaml.Node
	require.NoError(t, yaml.Unmarshal(data, &root))
	written := map[string]bool{}
	collectPaths(root.Content[0], "", written)
	var missing []string
	for _, k := range leafKeys(reflect.TypeOf(Config{}), "", map[reflect.Type]bool{}) {
		if _, old := deprecatedKeys[k]; written[k] || old {
			continue
		}
		// A list empty by default is written empty; its entries' keys are documented in a comment.
		if list, leaf, ok := strings.Cut(k, "[]."); ok && emptyLists[list] && written[list] &&
			strings.Contains(string(data), leaf[strings.LastIndex(leaf, ".")+1:]+":") {
			continue
		}
		missing = append(missing, k)
	}
	assert.Empty(t, missing, "keys the reference config does not document")
}

// emptyLists are lists that are empty by default (so the reference config, which holds the defaults,
// shows their entries' keys in a comment).
var emptyLists = map[string]bool{"http.tokens": true, "notify.receivers": true, "notify.routes": true}

func collectPaths(n *yaml.Node, path string, out map[string]bool) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := join(path, n.Content[i].Value)
			if path == "types" {
				p = "types.default" // a key shown on any example type documents it
			}
			out[p] = true
			collectPaths(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			collectPaths(c, path+"[]", out)
		}
	}
}

// leafKeys lists every key path of t; a map contributes its value type's keys under "default" and a
// list of blocks its element's keys under "[]". The tls block's keys are documented at its first
// occurrence (redis.tls); later tls blocks need only be present.
func leafKeys(t reflect.Type, path string, documented map[reflect.Type]bool) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeOf(TLS{}) && documented[t], decodesItself(t):
		return []string{path}
	case t.Kind() == reflect.Struct:
		documented[t] = true
		var out []string
		for i := range t.NumField() {
			if name := yamlName(t.Field(i)); name != "" {
				out = append(out, leafKeys(t.Field(i).Type, join(path, name), documented)...)
			}
		}
		return out
	case t.Kind() == reflect.Map:
		return leafKeys(t.Elem(), join(path, DefaultType), documented)
	case t.Kind() == reflect.Slice && decodesItself(t.Elem()):
		return []string{path}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		return leafKeys(t.Elem(), path+"[]", documented)
	}
	return []string{path}
}
