package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/heartbeatd/heartbeatd/internal/ident"
	"github.com/heartbeatd/heartbeatd/internal/typeindex"
)

// validator collects every problem, each naming its key, so one run of check-config lists them all.
type validator struct{ errs []error }

func (v *validator) add(key, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...)))
}

// positive rejects zero and negative values: a zero interval would spin a ticker or a loop.
func (v *validator) positive(key string, d time.Duration) {
	if d <= 0 {
		v.add(key, "must be > 0")
	}
}

func (v *validator) nonNegative(key string, d time.Duration) {
	if d < 0 {
		v.add(key, "%s must not be negative", FormatDuration(d))
	}
}

func (v *validator) positiveInt(key string, n int64) {
	if n <= 0 {
		v.add(key, "must be > 0")
	}
}

func (v *validator) required(key, s string) bool {
	if strings.TrimSpace(s) == "" {
		v.add(key, "required")
		return false
	}
	return true
}

// Validate checks every key and returns all problems joined, or nil.
func (c *Config) Validate() error {
	v := &validator{}
	c.validateRedis(v)
	c.validateTypes(v)
	c.validateSchedules(v)
	c.validateIngest(v)
	c.validateEvents(v)
	c.validateDetection(v)
	c.validateCluster(v)
	c.validateHTTP(v)
	c.validateOutputs(v)
	c.validateCorrelation(v)
	c.validateNotify(v)
	v.nonNegative("retention.forget_after", c.Retention.ForgetAfter)
	c.validateHistory(v)
	c.validateMetrics(v)
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		v.add("log.level", "must be debug, info, warn or error")
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		v.add("log.format", "must be json or console")
	}
	v.positive("shutdown_timeout", c.ShutdownTimeout)
	return errors.Join(v.errs...)
}

func (c *Config) validateRedis(v *validator) {
	r := c.Redis
	if len(r.Addrs) == 0 {
		v.add("redis.addrs", "required")
	}
	for i, a := range r.Addrs {
		hostPort(v, fmt.Sprintf("redis.addrs[%d]", i), a)
	}
	if r.DB < 0 {
		v.add("redis.db", "must not be negative")
	} else if r.DB != 0 && len(r.Addrs) > 1 {
		v.add("redis.db", "must be 0 with Redis Cluster (several addrs)")
	}
	if v.required("redis.key_prefix", r.KeyPrefix) && strings.ContainsAny(r.KeyPrefix, "{} \t\r\n") {
		// Braces would become the hash tag and put every slot on one Redis Cluster node.
		v.add("redis.key_prefix", "%q must not contain braces or spaces", r.KeyPrefix)
	}
	switch {
	case r.Slots < 1 || r.Slots > MaxSlots:
		v.add("redis.slots", "%d must be between 1 and %d", r.Slots, MaxSlots)
	case r.Slots&(r.Slots-1) != 0:
		v.add("redis.slots", "%d is not a power of two", r.Slots)
	}
	if r.PoolSize < 0 {
		v.add("redis.pool_size", "must not be negative (0 = go-redis default)")
	}
	validateTLS(v, "redis.tls", r.TLS)
}

func hostPort(v *validator, key, addr string) bool {
	// An empty host is fine: for a listener it means every interface.
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		v.add(key, "%q: want host:port", redactAddr(addr))
		return false
	}
	return true
}

// redactAddr hides whatever precedes an "@" in an address: credentials written into a host:port by
// mistake must not reach the error that rejects it.
func redactAddr(addr string) string {
	if i := strings.LastIndex(addr, "@"); i >= 0 {
		return Redaction + addr[i:]
	}
	return addr
}

func validateTLS(v *validator, key string, t TLS) {
	if !t.Enabled {
		if t.configured() {
			// Files set with TLS off would silently connect in plaintext.
			v.add(key+".enabled", "false, but the block sets files or options: set enabled: true or remove them")
		}
		return
	}
	if _, err := t.build(); err != nil {
		v.add(key, "%v", err)
	}
}

func validateSASL(v *validator, key string, s SASL) {
	if !validSASLMechanism(s.MechanismName) {
		v.add(key+".mechanism", "%q must be \"\", plain, scram-sha-256 or scram-sha-512", s.MechanismName)
		return
	}
	if s.MechanismName == "" {
		return
	}
	mech := strings.ToLower(s.MechanismName)
	if s.Username == "" {
		v.add(key+".username", "required with mechanism %s", mech)
	}
	if s.Password == "" {
		v.add(key+".password", "required with mechanism %s (or password_file)", mech)
	}
}

// maxFlapCount bounds the interruptions remembered per device for flapping.
const maxFlapCount = 100

func (c *Config) validateTypes(v *validator) {
	if _, ok := c.Types[DefaultType]; !ok {
		v.add("types.default", "required")
	}
	if p := typeindex.CountProblem(len(c.Types)); p != "" {
		v.add("types", "%s", p)
	}
	names := make([]string, 0, len(c.Types))
	for name := range c.Types {
		names = append(names, name)
	}
	sort.Strings(names)
	policies := c.Policies()
	for _, name := range names {
		key := "types." + name
		if p := ident.TypeProblem(name); p != "" {
			v.add(fmt.Sprintf("types[%q]", name), "a type name %s", p)
			continue
		}
		tp := c.Types[name]
		if tp.Timeout != nil && *tp.Timeout <= 0 {
			v.add(key+".timeout", "must be > 0")
		}
		if tp.RepeatEvery != nil {
			v.nonNegative(key+".repeat_every", *tp.RepeatEvery)
		}
		if tp.MaxRepeats != nil && *tp.MaxRepeats < 0 {
			v.add(key+".max_repeats", "must not be negative (0 = repeat until recovery or ack)")
		}
		v.warnAfter(key, c.Types[name], policies.byName[name])
		if f := tp.Flapping; f != nil {
			switch {
			case f.Count < 0 || f.Count == 1:
				v.add(key+".flapping.count", "must be 2 or more (0 = off)")
			case f.Count > 0 && f.Window <= 0:
				v.add(key+".flapping.window", "must be > 0")
			case f.Count > maxFlapCount:
				v.add(key+".flapping.count", "at most %d", maxFlapCount)
			}
		}
	}
}

// warnAfter checks a type's resolved warn_after (written or inherited from default): a warning must come
// before the interruption it announces, and a schedule's deadline follows expected times, not a last
// signal, so a warning measured from the last signal would mean nothing there.
func (v *validator) warnAfter(key string, tp TypePolicy, pol Policy) {
	w := pol.WarnAfter
	switch {
	case tp.WarnAfter != nil && *tp.WarnAfter < 0:
		v.add(key+".warn_after", "must not be negative (0 = no early warning)")
	case w <= 0:
	case tp.Schedule != nil:
		v.add(key+".warn_after", "%s cannot be combined with schedule (set warn_after: 0 on this type)", FormatDuration(w))
	case w >= pol.Timeout:
		from := ""
		if tp.WarnAfter == nil {
			from = " (inherited from types.default)"
		}
		v.add(key+".warn_after", "%s%s must be shorter than the type's timeout (%s)", FormatDuration(w), from, FormatDuration(pol.Timeout))
	}
}

func (c *Config) validateIngest(v *validator) {
	in := c.Ingest
	v.nonNegative("ingest.max_clock_skew", in.MaxClockSkew)
	v.nonNegative("ingest.coalesce", in.Coalesce)
	if in.Coalesce > 0 {
		// Coalescing lets an alarm fire up to coalesce early: at or beyond a timeout it would fire
		// for devices that are signalling on time.
		p := c.Policies()
		shortest, shortestName := time.Duration(0), ""
		for _, name := range p.names {
			if t := p.byName[name].Timeout; t > 0 && (shortestName == "" || t < shortest) {
				shortest, shortestName = t, name
			}
			if w := p.byName[name].WarnAfter; w > 0 && in.Coalesce >= w {
				v.add("ingest.coalesce", "%s must be shorter than every warn_after (types.%s.warn_after is %s)",
					FormatDuration(in.Coalesce), name, FormatDuration(w))
			}
		}
		if shortestName != "" && in.Coalesce >= shortest {
			v.add("ingest.coalesce", "%s must be shorter than every timeout (types.%s.timeout is %s)",
				FormatDuration(in.Coalesce), shortestName, FormatDuration(shortest))
		}
	}
	v.positiveInt("ingest.batch", int64(in.Batch))
	v.nonNegative("ingest.linger", in.Linger)
	v.positiveInt("ingest.max_in_flight", int64(in.MaxInFlight))
	v.positive("ingest.max_lag", in.MaxLag)
	v.nonNegative("ingest.offline_grace", in.OfflineGrace)

	m := in.MQTT
	if m.Enabled {
		if len(m.Brokers) == 0 {
			v.add("ingest.mqtt.brokers", "required when enabled")
		}
		for i, b := range m.Brokers {
			key := fmt.Sprintf("ingest.mqtt.brokers[%d]", i)
			u, err := url.Parse(b)
			if err != nil || u.Host == "" {
				v.add(key, "%q: want scheme://host:port", RedactURL(b))
				continue
			}
			switch {
			case plaintextMQTT(u.Scheme):
				if m.TLS.Enabled {
					v.add(key, "%q is plaintext but ingest.mqtt.tls.enabled is true: use ssl://, mqtts:// or wss://", RedactURL(b))
				}
			case slices.Contains([]string{"ssl", "tls", "mqtts", "tcps", "wss"}, u.Scheme):
			default:
				v.add(key, "%q: scheme must be tcp, mqtt, ssl, tls, mqtts, tcps, ws or wss", RedactURL(b))
			}
		}
		if len(m.Subscriptions) == 0 {
			v.add("ingest.mqtt.subscriptions", "required when enabled")
		}
		for i, s := range m.Subscriptions {
			validateSubscription(v, fmt.Sprintf("ingest.mqtt.subscriptions[%d]", i), s)
		}
	}
	if m.QoS < 0 || m.QoS > 2 {
		v.add("ingest.mqtt.qos", "must be 0, 1 or 2")
	}
	validateTLS(v, "ingest.mqtt.tls", m.TLS)
	if m.Enabled && m.Probe.Enabled {
		if m.Probe.Topic == "" || strings.ContainsAny(m.Probe.Topic, "+#") || strings.HasPrefix(m.Probe.Topic, "$") {
			v.add("ingest.mqtt.probe.topic", "%q: want a topic name without wildcards, not starting with $", m.Probe.Topic)
		}
		v.nonNegative("ingest.mqtt.probe.every", m.Probe.Every)
		if m.Probe.Every >= in.MaxLag {
			// A probe is the source's proof of delivery: one per max_lag would hold claims back between two.
			v.add("ingest.mqtt.probe.every", "%s must be shorter than ingest.max_lag (%s)", FormatDuration(m.Probe.Every), FormatDuration(in.MaxLag))
		}
	}

	k := in.Kafka
	if k.Enabled {
		brokers(v, "ingest.kafka.brokers", k.Brokers)
		if len(k.Topics) == 0 {
			v.add("ingest.kafka.topics", "required when enabled")
		}
		for i, t := range k.Topics {
			v.required(fmt.Sprintf("ingest.kafka.topics[%d]", i), t)
		}
		v.required("ingest.kafka.group_id", k.GroupID)
		v.positive("ingest.kafka.session_timeout", k.SessionTimeout)
	}
	validateTLS(v, "ingest.kafka.tls", k.TLS)
	validateSASL(v, "ingest.kafka.sasl", k.SASL)
}

func brokers(v *validator, key string, list []string) {
	if len(list) == 0 {
		v.add(key, "required")
	}
	for i, b := range list {
		hostPort(v, fmt.Sprintf("%s[%d]", key, i), b)
	}
}

// validateSubscription applies the topic template rules internal/ingest enforces, so check-config finds a
// bad template before the daemon does.
func validateSubscription(v *validator, key string, s Subscription) {
	if !v.required(key+".topic", s.Topic) {
		return
	}
	if strings.HasPrefix(s.Topic, "$share/") {
		v.add(key+".topic", "%q: use shared_group instead of a $share/ prefix", s.Topic)
		return
	}
	devices, types, parents := 0, 0, 0
	levels := strings.Split(s.Topic, "/")
	for i, l := range levels {
		switch {
		case l == "{device_id}":
			devices++
		case l == "{device_type}":
			types++
		case l == "{parent_id}":
			parents++
		case strings.ContainsAny(l, "{}"):
			v.add(key+".topic", "%q: level %q: a placeholder must be a whole level ({device_id}, {device_type} or {parent_id})", s.Topic, l)
			return
		case l == "#" && i != len(levels)-1:
			v.add(key+".topic", "%q: # must be the last level", s.Topic)
			return
		case l != "+" && l != "#" && strings.ContainsAny(l, "+#"):
			v.add(key+".topic", "%q: level %q: a wildcard must be a whole level", s.Topic, l)
			return
		}
	}
	if devices != 1 {
		v.add(key+".topic", "%q must contain {device_id} exactly once", s.Topic)
	}
	if types > 1 {
		v.add(key+".topic", "%q must contain {device_type} at most once", s.Topic)
	}
	if parents > 1 {
		v.add(key+".topic", "%q must contain {parent_id} at most once", s.Topic)
	}
	if strings.ContainsAny(s.SharedGroup, "/+#") {
		v.add(key+".shared_group", "%q must not contain / + #", s.SharedGroup)
	}
	switch s.Presence {
	case "", PresenceOffline, PresenceOnline:
	default:
		v.add(key+".presence", "%q: want offline or online", s.Presence)
	}
	if s.Payload != "" && s.Presence == "" {
		v.add(key+".payload", "only with presence (a signal subscription takes every payload)")
	}
}

// maxTopicPartitions is far above any sane events topic; more is surely a typo.
const maxTopicPartitions = 10000

func (c *Config) validateEvents(v *validator) {
	e := c.Events.Kafka
	brokers(v, "events.kafka.brokers", e.Brokers)
	v.required("events.kafka.topic", e.Topic)
	if v.required("events.kafka.deadletter_topic", e.DeadletterTopic) && e.DeadletterTopic == e.Topic {
		v.add("events.kafka.deadletter_topic", "must differ from events.kafka.topic (consumers would read dead letters as events)")
	}
	// Checked with creation off too: they also make the command shown for a missing topic.
	if e.CreateTopics.Partitions < 1 || e.CreateTopics.Partitions > maxTopicPartitions {
		v.add("events.kafka.create_topics.partitions", "%d must be between 1 and %d", e.CreateTopics.Partitions, maxTopicPartitions)
	}
	if e.CreateTopics.ReplicationFactor < 1 || e.CreateTopics.ReplicationFactor > math.MaxInt16 {
		v.add("events.kafka.create_topics.replication_factor", "%d must be between 1 and %d (the number of brokers at most)",
			e.CreateTopics.ReplicationFactor, math.MaxInt16)
	}
	validateTLS(v, "events.kafka.tls", e.TLS)
	validateSASL(v, "events.kafka.sasl", e.SASL)
}

func (c *Config) validateDetection(v *validator) {
	d := c.Detection
	v.positive("detection.max_idle_wait", d.MaxIdleWait)
	v.positiveInt("detection.batch", int64(d.Batch))
	v.positiveInt("detection.scanners", int64(d.Scanners))
	v.nonNegative("detection.grace_after_outage", d.GraceAfterOutage)
	v.positive("detection.lease", d.Lease)
	v.positiveInt("detection.max_publish_attempts", int64(d.MaxPublishAttempts))
	v.positive("detection.stall", d.Stall)
	if d.Stall > 0 && d.Stall < MinStall {
		v.add("detection.stall", "%s must be at least %s (the stall check ticks every %s)", FormatDuration(d.Stall),
			FormatDuration(MinStall), FormatDuration(StallTick))
	}
	v.positive("detection.max_hold_back", d.MaxHoldBack)
	v.positive("detection.max_clock_offset", d.MaxClockOffset)
	v.positive("detection.watchdog_every", d.WatchdogEvery)
	v.positive("detection.sweep_every", d.SweepEvery)
	v.nonNegative("detection.parent_wait", d.ParentWait)
	if d.LagThreshold != nil {
		v.positive("detection.lag_threshold", *d.LagThreshold)
		if *d.LagThreshold > 0 && *d.LagThreshold != c.Ingest.MaxLag {
			v.add("detection.lag_threshold", "deprecated name of ingest.max_lag, and the two disagree (%s, %s): keep only ingest.max_lag",
				FormatDuration(*d.LagThreshold), FormatDuration(c.Ingest.MaxLag))
		}
	}
}

func (c *Config) validateCluster(v *validator) {
	cl := c.Cluster
	v.positive("cluster.replica_heartbeat", cl.ReplicaHeartbeat)
	v.positive("cluster.slot_lease", cl.SlotLease)
	if cl.ReplicaHeartbeat > 0 && cl.SlotLease > 0 && cl.SlotLease <= cl.ReplicaHeartbeat {
		// A lease that lapses before its renewal would hand slots back and forth between replicas.
		v.add("cluster.slot_lease", "%s must be longer than cluster.replica_heartbeat (%s)",
			FormatDuration(cl.SlotLease), FormatDuration(cl.ReplicaHeartbeat))
	}
	if strings.ContainsFunc(cl.ReplicaID, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		v.add("cluster.replica_id", "%q must not contain spaces or control characters", cl.ReplicaID)
	}
}

func (c *Config) validateHTTP(v *validator) {
	h := c.HTTP
	open := h.Token == "" && len(h.Tokens) == 0
	if v.required("http.listen", h.Listen) && hostPort(v, "http.listen", h.Listen) && open && !loopback(h.Listen) {
		// Without a token anyone who reaches the port can ack, delete and silence the whole fleet.
		v.add("http.listen", "%q accepts connections from other hosts, but no API token is set: set http.token, "+
			"http.token_file (HEARTBEATD_HTTP_TOKEN_FILE) or http.tokens, or listen on 127.0.0.1", h.Listen)
	}
	if h.Token != "" && !presentable(h.Token) {
		// HTTP trims a header value's surrounding spaces and cannot carry control characters: no
		// request could ever present such a token.
		v.add("http.token", "must not start or end with spaces or contain control characters")
	}
	c.validateTokens(v)
	v.positiveInt("http.max_body_bytes", h.MaxBodyBytes)
}

// loopback reports whether a listen address (host:port) accepts connections from this host only. An
// empty host, 0.0.0.0, :: and any name other than localhost mean other hosts may connect.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Warning is a setting that works but weakens security; the daemon logs each once at start.
type Warning struct {
	Key     string // the key at fault, as in validation errors
	Message string
}

// Warnings lists the settings that expose credentials or traffic: certificate checks turned off, and
// passwords or SASL over plaintext connections. Sources that are off are not looked at.
func (c *Config) Warnings() []Warning {
	var out []Warning
	warn := func(key, format string, args ...any) {
		out = append(out, Warning{Key: key, Message: fmt.Sprintf(format, args...)})
	}
	skipVerify := func(key string, t TLS) {
		if t.Enabled && t.InsecureSkipVerify {
			warn(key+".insecure_skip_verify", "true: the server's certificate is not checked, so anyone on the path can "+
				"pose as the server and read the traffic, credentials included")
		}
	}
	sasl := func(key string, s SASL, t TLS) {
		switch strings.ToLower(s.MechanismName) {
		case SASLNone:
		case SASLPlain:
			if !t.Enabled {
				warn(key+".mechanism", "plain without TLS (%s.enabled is false): the password crosses the network in clear text", tlsKey(key))
			}
		default:
			if !t.Enabled {
				warn(key+".mechanism", "%s without TLS (%s.enabled is false): the password is not sent, but the "+
					"connection is unencrypted and can be read or taken over", strings.ToLower(s.MechanismName), tlsKey(key))
			}
		}
	}

	skipVerify("redis.tls", c.Redis.TLS)
	if c.Redis.Password != "" && !c.Redis.TLS.Enabled {
		warn("redis.password", "sent in clear text: redis.tls.enabled is false")
	}

	if m := c.Ingest.MQTT; m.Enabled {
		skipVerify("ingest.mqtt.tls", m.TLS)
		for i, b := range m.Brokers {
			u, err := url.Parse(b)
			if err != nil {
				continue // a validation error already
			}
			_, inURL := u.User.Password()
			if (m.Password == "" && !inURL) || !plaintextMQTT(u.Scheme) {
				continue
			}
			warn(fmt.Sprintf("ingest.mqtt.brokers[%d]", i), "%q is plaintext: the MQTT password crosses the network in "+
				"clear text (use ssl://, mqtts:// or wss://)", RedactURL(b))
		}
	}
	if k := c.Ingest.Kafka; k.Enabled {
		skipVerify("ingest.kafka.tls", k.TLS)
		sasl("ingest.kafka.sasl", k.SASL, k.TLS)
	}
	skipVerify("events.kafka.tls", c.Events.Kafka.TLS)
	sasl("events.kafka.sasl", c.Events.Kafka.SASL, c.Events.Kafka.TLS)
	return out
}

// tlsKey is the tls block beside a sasl block ("events.kafka.sasl" → "events.kafka.tls").
func tlsKey(saslKey string) string {
	return strings.TrimSuffix(saslKey, "sasl") + "tls"
}

func plaintextMQTT(scheme string) bool {
	switch scheme {
	case "tcp", "mqtt", "ws":
		return true
	}
	return false
}
