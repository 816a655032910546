package config

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Named tokens come from a file or as a digest; the API sees only digests, names, roles and scopes.
func TestAccessTokens(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ops")
	require.NoError(t, os.WriteFile(file, []byte("ops-secret\n"), 0o600))
	cfg, err := Parse([]byte(minimal+`http:
  listen: 0.0.0.0:8080
  token: admin-secret
  tokens:
    - {name: ops, role: operate, token_file: `+file+`}
    - {name: berlin-viewer, role: read, token_sha256: `+strings.ToUpper(sha256Hex("viewer-secret"))+`, scope: labels.site=berlin}
    - {name: meters, role: signal, token_sha256: `+sha256Hex("meter-secret")+`, scope: device_type=meter}
`), noEnv)
	require.NoError(t, err)
	got := cfg.HTTP.AccessTokens()
	require.Len(t, got, 4)
	want := []struct {
		name, secret string
		role         Role
		scope        Scope
	}{
		{AdminTokenName, "admin-secret", RoleAdmin, Scope{}},
		{"ops", "ops-secret", RoleOperate, Scope{}},
		{"berlin-viewer", "viewer-secret", RoleRead, Scope{Label: "site", Value: "berlin"}},
		{"meters", "meter-secret", RoleSignal, Scope{Type: "meter"}},
	}
	for i, w := range want {
		assert.Equal(t, w.name, got[i].Name)
		assert.Equal(t, w.role, got[i].Role, w.name)
		assert.Equal(t, w.scope, got[i].Scope, w.name)
		assert.Equal(t, sha256.Sum256([]byte(w.secret)), got[i].Digest, w.name)
	}
	// Printed (check-config, logs), the config shows names, roles and scopes but no secret.
	printed := cfg.String()
	for _, secret := range []string{"admin-secret", "ops-secret", sha256Hex("ops-secret")} {
		assert.NotContains(t, printed, secret)
	}
	assert.Contains(t, printed, "name: berlin-viewer")
	assert.Contains(t, printed, "scope: labels.site=berlin")
}

// Named tokens alone are enough to listen beyond loopback: every request then needs one.
func TestNamedTokenAllowsOpenListen(t *testing.T) {
	_, err := Parse([]byte(minimal+"http: {listen: '0.0.0.0:8080', tokens: [{name: viewer, role: read, token_sha256: "+
		sha256Hex("x")+"}]}"), noEnv)
	require.NoError(t, err)
}

func TestAccessTokenValidation(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	spaced := filepath.Join(t.TempDir(), "spaced")
	require.NoError(t, os.WriteFile(spaced, []byte(" x\n"), 0o600))
	d := sha256Hex("a")
	cases := map[string]struct{ token, want string }{
		"no name":       {"{role: read, token_sha256: " + d + "}", `http.tokens[0].name: "": want 1 to 64 letters`},
		"bad name":      {"{name: 'a b', role: read, token_sha256: " + d + "}", `http.tokens[0].name: "a b"`},
		"reserved name": {"{name: http.token, role: read, token_sha256: " + d + "}", `"http.token" is taken`},
		"bad role":      {"{name: x, role: owner, token_sha256: " + d + "}", `http.tokens[0].role: "owner": want read, signal, operate or admin`},
		"no secret":     {"{name: x, role: read}", "http.tokens[0]: set exactly one of token_file and token_sha256"},
		"both secrets":  {"{name: x, role: read, token_file: " + empty + ", token_sha256: " + d + "}", "set exactly one"},
		"token as sha":  {"{name: x, role: read, token_sha256: my-secret}", "want the 64 hex digits of the token's sha256"},
		"missing file":  {"{name: x, role: read, token_file: /nonexistent/tok}", "http.tokens[0].token_file: open /nonexistent/tok"},
		"empty file":    {"{name: x, role: read, token_file: " + empty + "}", "is empty"},
		"spaced token":  {"{name: x, role: read, token_file: " + spaced + "}", "no request could present it"},
		"bad scope":     {"{name: x, role: read, token_sha256: " + d + ", scope: site=berlin}", `http.tokens[0].scope: "site=berlin": want labels.<name>=<value> or device_type=<type>`},
		"empty scope":   {"{name: x, role: read, token_sha256: " + d + ", scope: 'labels.site='}", "want labels.<name>=<value>"},
		"scoped admin":  {"{name: x, role: admin, token_sha256: " + d + ", scope: device_type=meter}", "an admin token acts on the whole fleet"},
		"unknown key":   {"{name: x, role: read, token: a}", "token"},
		"same as admin": {"{name: x, role: read, token_sha256: " + sha256Hex("admin-secret") + "}", "the same token as http.token"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			parseFails(t, minimal+"http: {token: admin-secret, tokens: ["+c.token+"]}", noEnv, c.want)
		})
	}
	parseFails(t, minimal+"http: {tokens: [{name: a, role: read, token_sha256: "+d+"}, {name: a, role: read, token_sha256: "+
		sha256Hex("b")+"}, {name: c, role: read, token_sha256: "+d+"}]}", noEnv,
		`http.tokens[1].name: "a" is taken`, "http.tokens[2]: the same token as http.tokens[0]")
}

func TestRoleOrder(t *testing.T) {
	for i, name := range []string{"read", "signal", "operate", "admin"} {
		r, ok := ParseRole(name)
		require.True(t, ok, name)
		assert.Equal(t, Role(i+1), r)
		assert.Equal(t, name, r.String())
	}
	_, ok := ParseRole("none")
	assert.False(t, ok, "none is no role a token can have")
}
