package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Redaction replaces every set secret in Redacted's copy.
const Redaction = "<redacted>"

// secretKeys are the keys holding a secret; each may instead be read from <key>_file.
var secretKeys = map[string]bool{"password": true, "token": true, "routing_key": true, "webhook_url": true}

// readSecretFiles fills every password/token from its *_file sibling. It walks the struct, so a new
// block with a password gets its password_file for free.
func readSecretFiles(cfg *Config) error {
	var errs []error
	secretWalk(reflect.ValueOf(cfg).Elem(), "", func(v reflect.Value, path string, fileField reflect.Value) {
		file := fileField.String()
		if file == "" {
			return
		}
		if v.String() != "" {
			errs = append(errs, fmt.Errorf("config: %s and %s_file: set only one", path, path))
			return
		}
		s, err := readSecret(file)
		if err != nil {
			errs = append(errs, fmt.Errorf("config: %s_file: %w", path, err))
			return
		}
		v.SetString(s)
	})
	return errors.Join(errs...)
}

// readSecret is a secret file's content. Editors and `echo` end files with a newline that is never part
// of the secret.
func readSecret(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("%s is empty", file)
	}
	return s, nil
}

// secretWalk calls fn for every secret string field under v, with its dotted path and its *_file
// sibling (an invalid Value when the struct has none).
func secretWalk(v reflect.Value, path string, fn func(secret reflect.Value, path string, file reflect.Value)) {
	switch v.Kind() {
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			name := yamlName(t.Field(i))
			if name == "" {
				continue
			}
			f := v.Field(i)
			if secretKeys[name] && f.Kind() == reflect.String {
				var file reflect.Value
				for j := range t.NumField() {
					if yamlName(t.Field(j)) == name+"_file" {
						file = v.Field(j)
					}
				}
				fn(f, join(path, name), file)
				continue
			}
			secretWalk(f, join(path, name), fn)
		}
	case reflect.Slice:
		for i := range v.Len() {
			secretWalk(v.Index(i), fmt.Sprintf("%s[%d]", path, i), fn)
		}
	case reflect.Pointer: // a receiver's kind (notify.receivers[].email)
		if !v.IsNil() {
			secretWalk(v.Elem(), path, fn)
		}
	}
}

// Redacted returns a deep copy with every set password and token replaced by Redaction, and the
// MQTT broker and Alertmanager URLs redacted (RedactURL): safe to log or print.
func (c *Config) Redacted() *Config {
	r := c.Clone()
	secretWalk(reflect.ValueOf(r).Elem(), "", func(v reflect.Value, _ string, _ reflect.Value) {
		if v.String() != "" {
			v.SetString(Redaction)
		}
	})
	for i, b := range r.Ingest.MQTT.Brokers {
		r.Ingest.MQTT.Brokers[i] = RedactURL(b)
	}
	for i, u := range r.Outputs.Alertmanager.URLs {
		r.Outputs.Alertmanager.URLs[i] = RedactURL(u)
	}
	redactNotify(&r.Notify)
	return r
}

// redactedPart replaces each secret part of a URL in RedactURL's answer.
const redactedPart = "redacted"

// RedactURL shows a URL as it may go into a log or an error: the password of its user:password@ part,
// a user without a password (often a token: https://<token>@host), every query value (?api_key=…) and
// a fragment are replaced by "redacted"; the scheme, host, path and query keys stay, to tell which URL
// is meant. A URL that does not parse is shown only when it has no "@", "?" or "#". The one redaction
// every package uses for configured URLs.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if strings.ContainsAny(s, "@?#") {
			return Redaction // unparsable and possibly carrying credentials
		}
		return s
	}
	redacted := false
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redactedPart)
		} else {
			u.User = url.User(redactedPart)
		}
		redacted = true
	}
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery, u.ForceQuery = redactQuery(u.RawQuery), false
		redacted = true
	}
	if u.Fragment != "" || u.RawFragment != "" {
		u.Fragment, u.RawFragment = redactedPart, ""
		redacted = true
	}
	if !redacted {
		return s
	}
	return u.String()
}

// redactQuery keeps a query's keys, in their order, and replaces every value; a part without "=" could be
// a bare secret, so it is replaced whole.
func redactQuery(q string) string {
	if q == "" {
		return ""
	}
	parts := strings.Split(q, "&")
	for i, p := range parts {
		if k, _, ok := strings.Cut(p, "="); ok {
			parts[i] = k + "=" + redactedPart
		} else if p != "" {
			parts[i] = redactedPart
		}
	}
	return strings.Join(parts, "&")
}

// String renders the redacted configuration as YAML, so a Config printed by accident leaks nothing.
func (c *Config) String() string {
	b, err := yaml.Marshal(c.Redacted())
	if err != nil {
		return "config: " + err.Error()
	}
	return string(b)
}

// Clone returns a deep copy sharing no slice, map or pointer with c.
func (c *Config) Clone() *Config {
	out := reflect.New(reflect.TypeOf(*c)).Elem()
	deepCopy(out, reflect.ValueOf(c).Elem())
	return out.Addr().Interface().(*Config)
}

var locationType = reflect.TypeOf((*time.Location)(nil))

func deepCopy(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Struct:
		for i := range src.NumField() {
			deepCopy(dst.Field(i), src.Field(i))
		}
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		s := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		for i := range src.Len() {
			deepCopy(s.Index(i), src.Index(i))
		}
		dst.Set(s)
	case reflect.Map:
		if src.IsNil() {
			return
		}
		m := reflect.MakeMapWithSize(src.Type(), src.Len())
		iter := src.MapRange()
		for iter.Next() {
			v := reflect.New(src.Type().Elem()).Elem()
			deepCopy(v, iter.Value())
			m.SetMapIndex(iter.Key(), v)
		}
		dst.Set(m)
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		if src.Type() == locationType { // immutable, and its fields cannot be set by reflection
			dst.Set(src)
			return
		}
		p := reflect.New(src.Type().Elem())
		deepCopy(p.Elem(), src.Elem())
		dst.Set(p)
	default:
		dst.Set(src)
	}
}
