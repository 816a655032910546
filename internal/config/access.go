package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"text/tabwriter"
	"unicode"
)

// APIToken is one named bearer token of http.tokens (docs/access.md). The token itself is never written
// in the config: token_file names a file holding it, or token_sha256 is the hex sha256 of it, so a
// config can be committed without the secret.
type APIToken struct {
	Name        string `yaml:"name"`
	Role        string `yaml:"role"`
	TokenFile   string `yaml:"token_file"`
	TokenSHA256 string `yaml:"token_sha256"`
	// Scope limits the devices the token reads and acts on: labels.<name>=<value> or device_type=<type>.
	Scope string `yaml:"scope,omitempty"`
	// FileSHA256 is the hex sha256 of token_file's content, filled when the config is loaded.
	FileSHA256 string `yaml:"-"`
}

// Role is what a token may do; each role includes every lower one.
type Role int

// The roles, lowest first (docs/access.md).
const (
	RoleNone    Role = iota
	RoleRead         // every GET of /v1
	RoleSignal       // read, and send signals over HTTP
	RoleOperate      // read, ack, silences, delete devices
	RoleAdmin        // everything: the registry, import, reload, requeue
)

var roleNames = []string{"none", "read", "signal", "operate", "admin"}

func (r Role) String() string {
	if r < RoleNone || int(r) >= len(roleNames) {
		return fmt.Sprintf("role(%d)", int(r))
	}
	return roleNames[r]
}

// ParseRole reads a role's name; false for anything else (and for "none").
func ParseRole(s string) (Role, bool) {
	for i, n := range roleNames {
		if i > 0 && n == s {
			return Role(i), true
		}
	}
	return RoleNone, false
}

// Scope limits a token to the devices with one label value or of one type; the zero Scope is the whole
// fleet.
type Scope struct {
	Label, Value string // labels.<Label>=<Value>
	Type         string // device_type=<Type>
}

// Whole reports whether the scope is the whole fleet.
func (s Scope) Whole() bool { return s == Scope{} }

// Matches reports whether a device of type typ (a base type) with labels is in the scope.
func (s Scope) Matches(typ string, labels map[string]string) bool {
	switch {
	case s.Type != "":
		return typ == s.Type
	case s.Label != "":
		v, ok := labels[s.Label]
		return ok && v == s.Value
	}
	return true
}

func (s Scope) String() string {
	switch {
	case s.Type != "":
		return "device_type=" + s.Type
	case s.Label != "":
		return "labels." + s.Label + "=" + s.Value
	}
	return ""
}

// ParseScope reads "labels.<name>=<value>" or "device_type=<type>"; "" is the whole fleet.
func ParseScope(s string) (Scope, error) {
	if s == "" {
		return Scope{}, nil
	}
	key, value, ok := strings.Cut(s, "=")
	if !ok || value == "" {
		return Scope{}, fmt.Errorf("%q: want labels.<name>=<value> or device_type=<type>", s)
	}
	if key == "device_type" {
		return Scope{Type: value}, nil
	}
	if label, ok := strings.CutPrefix(key, "labels."); ok && label != "" {
		return Scope{Label: label, Value: value}, nil
	}
	return Scope{}, fmt.Errorf("%q: want labels.<name>=<value> or device_type=<type>", s)
}

// AdminTokenName names http.token in act events and /v1/whoami.
const AdminTokenName = "http.token"

// AccessToken is a token as the API checks it: the sha256 of its secret, never the secret.
type AccessToken struct {
	Name   string
	Role   Role
	Scope  Scope
	Digest [sha256.Size]byte
}

// AccessTokens lists the tokens of a validated config: http.token (an admin named AdminTokenName), then
// http.tokens in order. None means the API is open to whoever reaches its loopback listener.
func (h HTTP) AccessTokens() []AccessToken {
	var out []AccessToken
	if h.Token != "" {
		out = append(out, AccessToken{Name: AdminTokenName, Role: RoleAdmin, Digest: sha256.Sum256([]byte(h.Token))})
	}
	for _, t := range h.Tokens {
		role, _ := ParseRole(t.Role)
		scope, _ := ParseScope(t.Scope)
		at := AccessToken{Name: t.Name, Role: role, Scope: scope}
		if d, err := hex.DecodeString(t.digestHex()); err == nil && len(d) == sha256.Size {
			copy(at.Digest[:], d)
			out = append(out, at)
		}
	}
	return out
}

func (t APIToken) digestHex() string {
	if t.FileSHA256 != "" {
		return t.FileSHA256
	}
	return strings.ToLower(t.TokenSHA256)
}

// readTokenFiles fills each http.tokens entry's FileSHA256 from its token_file; the secret itself is
// kept nowhere.
func readTokenFiles(cfg *Config) error {
	v := &validator{}
	for i := range cfg.HTTP.Tokens {
		t := &cfg.HTTP.Tokens[i]
		if t.TokenFile == "" {
			continue
		}
		key := fmt.Sprintf("http.tokens[%d].token_file", i)
		b, err := os.ReadFile(t.TokenFile)
		if err != nil {
			v.add(key, "%v", err)
			continue
		}
		// Editors and `echo` end files with a newline that is never part of the secret.
		s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		switch {
		case s == "":
			v.add(key, "%s is empty", t.TokenFile)
		case !presentable(s):
			v.add(key, "the token in %s starts or ends with spaces or contains control characters: "+
				"no request could present it", t.TokenFile)
		default:
			sum := sha256.Sum256([]byte(s))
			t.FileSHA256 = hex.EncodeToString(sum[:])
		}
	}
	return errors.Join(v.errs...)
}

// presentable: HTTP trims a header value's surrounding spaces and cannot carry control characters.
func presentable(token string) bool {
	return strings.TrimSpace(token) == token && strings.IndexFunc(token, unicode.IsControl) < 0
}

var (
	tokenNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)
	sha256HexRe = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
)

// validateTokens checks http.tokens: unique names, a known role, exactly one of token_file and
// token_sha256, a scope that parses (and none on an admin), and no two tokens with the same secret.
func (c *Config) validateTokens(v *validator) {
	names := map[string]bool{AdminTokenName: true}
	digests := map[string]string{}
	if c.HTTP.Token != "" {
		sum := sha256.Sum256([]byte(c.HTTP.Token))
		digests[hex.EncodeToString(sum[:])] = "http.token"
	}
	for i, t := range c.HTTP.Tokens {
		key := fmt.Sprintf("http.tokens[%d]", i)
		switch {
		case !tokenNameRe.MatchString(t.Name):
			v.add(key+".name", "%q: want 1 to 64 letters, digits, '.', '_', '@' or '-' (it names the token in act events)", t.Name)
		case names[t.Name]:
			v.add(key+".name", "%q is taken: every token needs its own name", t.Name)
		}
		names[t.Name] = true
		role, ok := ParseRole(t.Role)
		if !ok {
			v.add(key+".role", "%q: want read, signal, operate or admin", t.Role)
		}
		if scope, err := ParseScope(t.Scope); err != nil {
			v.add(key+".scope", "%v", err)
		} else if role == RoleAdmin && !scope.Whole() {
			v.add(key+".scope", "an admin token acts on the whole fleet (reload, import, requeue): give it no scope, or a lower role")
		}
		switch {
		case (t.TokenFile == "") == (t.TokenSHA256 == ""):
			v.add(key, "set exactly one of token_file and token_sha256")
		case t.TokenSHA256 != "" && !sha256HexRe.MatchString(t.TokenSHA256):
			v.add(key+".token_sha256", "want the 64 hex digits of the token's sha256 (sha256sum), not the token itself")
		}
		if d := t.digestHex(); d != "" {
			if other, dup := digests[d]; dup {
				v.add(key, "the same token as %s: a request could not tell which one acts", other)
			}
			digests[d] = key
		}
	}
}

// AccessTable describes the API's tokens for check-config: names, roles, scopes and where each secret
// comes from, never a secret or its digest.
func (c *Config) AccessTable() string {
	h := c.HTTP
	if h.Token == "" && len(h.Tokens) == 0 {
		return "api tokens: none: the API listens on loopback and every caller there is an admin\n"
	}
	var b strings.Builder
	b.WriteString("api tokens:\n")
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tROLE\tSCOPE\tSECRET")
	if h.Token != "" {
		from := "http.token"
		if h.TokenFile != "" {
			from = "token_file " + h.TokenFile
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", AdminTokenName, RoleAdmin, "whole fleet", from)
	}
	for _, t := range h.Tokens {
		scope, from := t.Scope, "token_sha256"
		if scope == "" {
			scope = "whole fleet"
		}
		if t.TokenFile != "" {
			from = "token_file " + t.TokenFile
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", t.Name, t.Role, scope, from)
	}
	_ = w.Flush()
	return b.String()
}
