package config

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// EnvPrefix starts every environment override: HEARTBEATD_<PATH>, the key path upper-cased and joined
// with "_" (redis.addrs → HEARTBEATD_REDIS_ADDRS).
const EnvPrefix = "HEARTBEATD"

var durationType = reflect.TypeOf(time.Duration(0))

// applyEnv walks cfg by its yaml tags and sets every key whose variable env finds. Walking the struct
// rather than listing variables keeps every key overridable, including ones added later.
func applyEnv(cfg *Config, env func(string) (string, bool)) error {
	var errs []error
	envWalk(reflect.ValueOf(cfg).Elem(), []string{EnvPrefix}, "", env, &errs)
	return errors.Join(errs...)
}

// EnvName is the variable that overrides the key at a dotted path ("ingest.mqtt.enabled" →
// HEARTBEATD_INGEST_MQTT_ENABLED; "types.temperature-sensor.timeout" →
// HEARTBEATD_TYPES_TEMPERATURE_SENSOR_TIMEOUT).
func EnvName(path string) string {
	segs := []string{EnvPrefix}
	for _, p := range strings.Split(path, ".") {
		segs = append(segs, envSegment(p))
	}
	return strings.Join(segs, "_")
}

// envSegment upper-cases a key and turns anything a shell cannot put in a variable name into "_".
func envSegment(key string) string {
	b := []byte(strings.ToUpper(key))
	for i, c := range b {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' {
			b[i] = '_'
		}
	}
	return string(b)
}

func envWalk(v reflect.Value, segs []string, path string, env func(string) (string, bool), errs *[]error) {
	t := v.Type()
	switch {
	case t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			name := yamlName(t.Field(i))
			if name == "" {
				continue
			}
			envWalk(v.Field(i), append(segs[:len(segs):len(segs)], envSegment(name)), join(path, name), env, errs)
		}
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		// Only entries the file already has: a variable cannot name a type, because
		// TEMPERATURE_SENSOR could be temperature-sensor, temperature_sensor or TEMPERATURE-SENSOR.
		bySeg := map[string][]string{}
		for _, k := range v.MapKeys() {
			bySeg[envSegment(k.String())] = append(bySeg[envSegment(k.String())], k.String())
		}
		segNames := make([]string, 0, len(bySeg))
		for s := range bySeg {
			segNames = append(segNames, s)
		}
		sort.Strings(segNames)
		for _, seg := range segNames {
			names := bySeg[seg]
			sort.Strings(names)
			if len(names) > 1 {
				// Report the clash only if a variable actually targets it.
				probe := reflect.New(t.Elem()).Elem()
				var hits []error
				envWalk(probe, append(segs[:len(segs):len(segs)], seg), join(path, names[0]), env, &hits)
				if n := countSet(probe); n > 0 || len(hits) > 0 {
					*errs = append(*errs, fmt.Errorf("config: %s_%s_*: ambiguous: %s.%s all map to it; rename a type",
						strings.Join(segs, "_"), seg, path, strings.Join(names, ", "+path+".")))
				}
				continue
			}
			key := reflect.ValueOf(names[0])
			elem := reflect.New(t.Elem()).Elem()
			elem.Set(v.MapIndex(key)) // map values are not addressable: edit a copy, store it back
			envWalk(elem, append(segs[:len(segs):len(segs)], seg), join(path, names[0]), env, errs)
			v.SetMapIndex(key, elem)
		}
	default:
		name := strings.Join(segs, "_")
		s, ok := env(name)
		if !ok {
			return
		}
		if err := setFromString(v, s); err != nil {
			*errs = append(*errs, fmt.Errorf("config: %s (%s): %w", name, path, err))
		}
	}
}

// countSet counts the non-zero leaves under v (used on a probe value to see if any variable hit it).
func countSet(v reflect.Value) int {
	switch v.Kind() {
	case reflect.Struct:
		n := 0
		for i := range v.NumField() {
			n += countSet(v.Field(i))
		}
		return n
	default:
		if v.IsZero() {
			return 0
		}
		return 1
	}
}

// setFromString parses one variable into a leaf value.
func setFromString(v reflect.Value, s string) error {
	if v.Kind() == reflect.Pointer {
		p := reflect.New(v.Type().Elem())
		if err := setFromString(p.Elem(), s); err != nil {
			return err
		}
		v.Set(p)
		return nil
	}
	if v.Type() == durationType {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 30s, 5m, 1h30m)", s)
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not a boolean (true or false)", s)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		v.SetInt(n)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.String {
			var list []string
			for _, item := range strings.Split(s, ",") {
				if item = strings.TrimSpace(item); item != "" {
					list = append(list, item)
				}
			}
			v.Set(reflect.ValueOf(list).Convert(v.Type()))
			return nil
		}
		// A list of blocks (mqtt subscriptions) has no flat form: take YAML, as strict as the file.
		p := reflect.New(v.Type())
		dec := yaml.NewDecoder(bytes.NewReader([]byte(s)))
		dec.KnownFields(true)
		if err := dec.Decode(p.Interface()); err != nil {
			return fmt.Errorf("want a YAML list: %w", err)
		}
		v.Set(p.Elem())
	default:
		return fmt.Errorf("cannot be set from the environment")
	}
	return nil
}
