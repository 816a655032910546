// Package config loads heartbeatd's YAML configuration (docs/configuration.md): built-in defaults, then a strict
// decode of the file (an unknown key is an error naming the key and its line), then HEARTBEATD_<PATH>
// environment overrides, then secrets read from *_file keys, then validation that names every bad key
// at once. It also resolves the per-type alarm policies, builds TLS settings for the Redis, MQTT and
// Kafka clients (SASL settings stay plain strings), redacts secrets for printing, and coordinates reloads
// (SIGHUP, POST /-/reload).
//
// configs/heartbeatd.yaml is the documented reference of every key; a test keeps it loadable.
//
// # Rules where docs/configuration.md is silent
//
//   - A key written with no value (`tls:` with everything below commented out) keeps its default; a
//     list written with no value is empty.
//   - Durations need a unit ("60s", "1m30s"): a bare number is rejected rather than guessed.
//   - Environment: a list is comma-separated (HEARTBEATD_REDIS_ADDRS=a:6379,b:6379);
//     HEARTBEATD_INGEST_MQTT_SUBSCRIPTIONS takes a YAML list ('[{topic: "d/{device_id}"}]'). A type's
//     keys are HEARTBEATD_TYPES_<NAME>_<KEY> for a type already in the file, NAME upper-cased with every
//     character other than a letter or digit turned into "_" (temperature-sensor → TEMPERATURE_SENSOR).
//   - *_file paths (password_file, token_file) and TLS files are relative to the working directory;
//     one trailing newline of a secret file is dropped. Setting both a secret and its *_file is an error.
//   - A tls block with files or options set but enabled false is an error (it would silently run
//     plaintext), and so is ingest.mqtt.tls.enabled with a plaintext (tcp://, mqtt://, ws://) broker.
//     An ssl://, tls://, mqtts://, tcps:// or wss:// broker uses TLS with the system roots even when the
//     block is off.
//   - A reload applies `types` and `time_intervals` only. Other changed keys are logged as needing a
//     restart, and the new types must also be valid together with the running keys (ingest.coalesce
//     shorter than every timeout), or the reload is rejected.
package config

import (
	"fmt"
	"time"
)

// Config is the whole configuration; the yaml tags are the keys of docs/configuration.md plus the tuning keys below
// it documents in configs/heartbeatd.yaml.
//
// A *Config handed out by Load, Parse or a Coordinator is shared: treat it as read-only.
type Config struct {
	Redis     Redis                 `yaml:"redis"`
	Types     map[string]TypePolicy `yaml:"types"`
	Ingest    Ingest                `yaml:"ingest"`
	Events    Events                `yaml:"events"`
	Detection Detection             `yaml:"detection"`
	Cluster   Cluster               `yaml:"cluster"`
	HTTP      HTTP                  `yaml:"http"`
	Log       Log                   `yaml:"log"`
	// Outputs are optional destinations that follow the events topic (outputs.go).
	Outputs Outputs `yaml:"outputs"`
	// Correlation groups interruptions into outages (correlation.go).
	Correlation Correlation `yaml:"correlation"`
	// Notify pages people from the events topic (notify.go, docs/notifications.md).
	Notify Notify `yaml:"notify"`
	// Retention forgets long-silent devices nobody registered.
	Retention Retention `yaml:"retention"`
	// History keeps past incidents for the incident list and availability (history.go).
	History History `yaml:"history"`
	// Metrics shapes optional metrics (groupmetrics.go).
	Metrics Metrics `yaml:"metrics"`
	// TimeIntervals are named time intervals in Alertmanager's syntax, for the types' quiet and active
	// hours and for recurring silences (schedules.go, docs/schedules.md). A reload applies them like types.
	TimeIntervals []TimeInterval `yaml:"time_intervals"`
	// ShutdownTimeout bounds the whole ordered stop after SIGINT/SIGTERM.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
}

// Redis is where deadlines live.
type Redis struct {
	// Addrs: one address is a standalone server, several are Redis Cluster seeds.
	Addrs        []string `yaml:"addrs"`
	Username     string   `yaml:"username"`
	Password     string   `yaml:"password"`
	PasswordFile string   `yaml:"password_file"`
	DB           int      `yaml:"db"` // standalone only
	TLS          TLS      `yaml:"tls"`
	KeyPrefix    string   `yaml:"key_prefix"`
	// Slots is the number of deadline shards, a power of two (docs/scaling.md: online doubling).
	Slots int `yaml:"slots"`
	// PoolSize is the connection pool per node; 0 leaves go-redis's default (10 per CPU).
	PoolSize int `yaml:"pool_size"`
}

// TLS is every tls block: Build turns it into a *tls.Config.
type TLS struct {
	Enabled bool   `yaml:"enabled"`
	CAFile  string `yaml:"ca_file"`
	// CertFile and KeyFile together present a client certificate (mutual TLS).
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// TypePolicy is one entry of `types` as written. A nil field was not written and inherits from
// `default` (and `default`'s from the built-in policy): the pointers are what tell an explicit
// `max_repeats: 0` (repeat until recovery) from an absent one. Resolve with Config.Policies.
type TypePolicy struct {
	Timeout     *time.Duration `yaml:"timeout,omitempty"`
	RepeatEvery *time.Duration `yaml:"repeat_every,omitempty"`
	MaxRepeats  *int           `yaml:"max_repeats,omitempty"`
	// WarnAfter, when > 0, publishes one `late` event this long after the last signal, before the
	// timeout interrupts (docs/events.md); it must be shorter than the timeout. 0 turns it off.
	WarnAfter *time.Duration `yaml:"warn_after,omitempty"`
	// Flapping, when written, is inherited as a whole; count 0 turns it off for the type.
	Flapping *Flapping `yaml:"flapping,omitempty"`
	// Quiet and Active name time_intervals: a deadline inside a quiet one, or outside every active one,
	// starts no incident (docs/schedules.md). Each list, when written, is inherited as a whole; [] clears it.
	Quiet  []string `yaml:"quiet,omitempty"`
	Active []string `yaml:"active,omitempty"`
	// Schedule is a 5-field cron expression of the times a signal is expected, read in ScheduleTZ; it
	// replaces the timeout: a signal sets the deadline to the next occurrence + Grace. Never inherited.
	Schedule   *string        `yaml:"schedule,omitempty"`
	ScheduleTZ *string        `yaml:"schedule_tz,omitempty"`
	Grace      *time.Duration `yaml:"grace,omitempty"`
}

// Flapping detects a device that keeps going silent and coming back (docs/events.md): the Count-th
// interruption within Window raises one `flapping` event, and its repeats pause until it has been stable
// for one Window.
type Flapping struct {
	Count  int           `yaml:"count"`
	Window time.Duration `yaml:"window"`
}

// Ingest is how signals come in.
type Ingest struct {
	// MaxClockSkew: a signal time further than this in the future is replaced by the receive time.
	MaxClockSkew time.Duration `yaml:"max_clock_skew"`
	// Coalesce > 0 skips a deadline write while the new deadline is less than this past the last one
	// written; it must be shorter than every timeout.
	Coalesce time.Duration `yaml:"coalesce"`
	// Batch is the most signals one Redis refresh carries, Linger how long a partial batch waits for
	// more while another is in flight (until full under a steady load), MaxInFlight how many batches
	// may await Redis at once (the backpressure bound).
	Batch       int           `yaml:"batch"`
	Linger      time.Duration `yaml:"linger"`
	MaxInFlight int           `yaml:"max_in_flight"`
	// MaxLag: a source whose signals reach Redis later than this (record age, or a message waiting for
	// its write) is blind for detection: its hold-back window opens at now − lag.
	MaxLag time.Duration `yaml:"max_lag"`
	// OfflineGrace: a presence subscription's offline message moves the device's deadline to its receipt
	// + this, so a quick reconnect is no incident (docs/signals.md).
	OfflineGrace time.Duration `yaml:"offline_grace"`
	MQTT         MQTT          `yaml:"mqtt"`
	Kafka        KafkaIngest   `yaml:"kafka"`
}

// MQTT is the MQTT signal source.
type MQTT struct {
	Enabled bool     `yaml:"enabled"`
	Brokers []string `yaml:"brokers"`
	// ClientID names the session: persistent (clean session off) for plain subscriptions, clean for
	// shared ones (docs/scaling.md); unique per replica. "" derives one from the replica (Config.MQTTClientID).
	ClientID      string         `yaml:"client_id"`
	Username      string         `yaml:"username"`
	Password      string         `yaml:"password"`
	PasswordFile  string         `yaml:"password_file"`
	TLS           TLS            `yaml:"tls"`
	QoS           int            `yaml:"qos"`
	Subscriptions []Subscription `yaml:"subscriptions"`
	// Probe: heartbeatd publishes to a topic of its own and expects it back within ingest.max_lag, so a
	// broker that stops delivering while the connection stays open is a blind window, not a silent fleet.
	Probe MQTTProbe `yaml:"probe"`
}

// MQTTProbe is ingest.mqtt.probe.
type MQTTProbe struct {
	Enabled bool `yaml:"enabled"`
	// Topic is where each replica publishes and reads its probe; {client_id} stands for its client id.
	Topic string `yaml:"topic"`
	// Every is how often a probe goes out: shorter than ingest.max_lag; 0 = half of it, at most 1s
	// (Config.MQTTProbeEvery).
	Every time.Duration `yaml:"every"`
}

// DefaultMQTTProbeTopic is ingest.mqtt.probe.topic's default.
const DefaultMQTTProbeTopic = "heartbeatd/probe/{client_id}"

// Subscription is one MQTT topic template: {device_id} exactly once and {device_type} at most once,
// each a whole topic level.
type Subscription struct {
	Topic string `yaml:"topic"`
	// SharedGroup non-empty subscribes as $share/<group>/<filter>, spreading load over replicas; such
	// subscriptions use a clean session so the broker hands a dead replica's share to the others.
	SharedGroup string `yaml:"shared_group,omitempty"`
	// Presence makes the subscription's messages a broker's word about the device (a last will, a client
	// event): PresenceOffline moves its deadline earlier, PresenceOnline is a signal. "" = signals.
	Presence string `yaml:"presence,omitempty"`
	// Payload, with Presence, is the payload a message must carry to count (compared without case and
	// surrounding space, e.g. "offline"); "" = any.
	Payload string `yaml:"payload,omitempty"`
}

// Presence values of a subscription.
const (
	PresenceOffline = "offline"
	PresenceOnline  = "online"
)

// KafkaIngest is the Kafka signal source.
type KafkaIngest struct {
	Enabled bool     `yaml:"enabled"`
	Brokers []string `yaml:"brokers"`
	Topics  []string `yaml:"topics"`
	GroupID string   `yaml:"group_id"`
	// SessionTimeout is how long the group coordinator waits for a silent member before giving its
	// partitions to the others: the longest a killed replica's partitions go unread, and the longest a
	// restarted replica waits for its first assignment (its previous self still holds them).
	SessionTimeout time.Duration `yaml:"session_timeout"`
	TLS            TLS           `yaml:"tls"`
	SASL           SASL          `yaml:"sasl"`
}

// SASL is every sasl block, as plain data: internal/kafkaclient.SASLMechanism builds the kafka-go
// mechanism from it.
type SASL struct {
	// MechanismName is "", plain, scram-sha-256 or scram-sha-512 (case-insensitive).
	MechanismName string `yaml:"mechanism"`
	Username      string `yaml:"username"`
	Password      string `yaml:"password"`
	PasswordFile  string `yaml:"password_file"`
}

// Events is where events and dead letters go out.
type Events struct {
	Kafka EventsKafka `yaml:"kafka"`
}

// EventsKafka is the event producer.
type EventsKafka struct {
	Brokers         []string `yaml:"brokers"`
	Topic           string   `yaml:"topic"`
	DeadletterTopic string   `yaml:"deadletter_topic"`
	// CreateTopics: heartbeatd creates topic and deadletter_topic when they are missing. Ingest topics are
	// the producers' and never created: a mistyped one would be read empty forever instead of reported.
	CreateTopics CreateTopics `yaml:"create_topics"`
	TLS          TLS          `yaml:"tls"`
	SASL         SASL         `yaml:"sasl"`
}

// CreateTopics is events.kafka.create_topics. Partitions and ReplicationFactor are also what the
// kafka-topics.sh command heartbeatd shows for a missing topic uses, so they count with Enabled off.
type CreateTopics struct {
	Enabled           bool `yaml:"enabled"`
	Partitions        int  `yaml:"partitions"`
	ReplicationFactor int  `yaml:"replication_factor"`
}

// Detection tunes the scanners and the claim → publish → acknowledge loop.
type Detection struct {
	// MaxIdleWait is the longest a scanner sleeps when it knows of no earlier deadline.
	MaxIdleWait time.Duration `yaml:"max_idle_wait"`
	// Batch is the most devices claimed per script call.
	Batch int `yaml:"batch"`
	// Scanners is how many claim loops run at once in a replica, each over its own share of the owned
	// slots, so Redis claims for one share while another share's events are on their way to Kafka.
	Scanners int `yaml:"scanners"`
	// GraceAfterOutage caps the grace after a blind window, which is each device's own timeout; 0 = no cap.
	GraceAfterOutage time.Duration `yaml:"grace_after_outage"`
	// Lease is how long a claim may stay unacknowledged before it is delivered again.
	Lease time.Duration `yaml:"lease"`
	// MaxPublishAttempts: a claim whose events Kafka refused for their content this often in a row is
	// parked in the dead set. Kafka being down or slow never parks a claim: it is retried until it passes.
	MaxPublishAttempts int `yaml:"max_publish_attempts"`
	// Stall: a pause of heartbeatd itself (process stop, GC, VM freeze, clock jump) longer than this is
	// a blind window of its own.
	Stall time.Duration `yaml:"stall"`
	// MaxHoldBack bounds every hold-back: past it detection resumes, flagged degraded.
	MaxHoldBack time.Duration `yaml:"max_hold_back"`
	// MaxClockOffset: a replica whose clock is further than this from Redis TIME stops scanning.
	MaxClockOffset time.Duration `yaml:"max_clock_offset"`
	// WatchdogEvery is how often each replica publishes a watchdog event through the alarm path, so
	// consumers and alert rules can tell a working pipeline from a silent one.
	WatchdogEvery time.Duration `yaml:"watchdog_every"`
	// SweepEvery is how often each slot's owner looks over its dormant incidents for a device that is
	// back (sweep.Sweeper): the bound on how late a recovery whose probe was lost is reported.
	SweepEvery time.Duration `yaml:"sweep_every"`
	// ParentWait is how long past its parent's deadline a silent child waits for the parent's verdict
	// (docs/concepts.md) before it alarms on its own.
	ParentWait time.Duration `yaml:"parent_wait"`
	// LagThreshold is the deprecated name of ingest.max_lag, still read (Deprecations says so); nil
	// when not written.
	LagThreshold *time.Duration `yaml:"lag_threshold,omitempty"`
}

// Cluster is how replicas share slots.
type Cluster struct {
	// ReplicaHeartbeat is how often a replica announces itself and renews its slot leases.
	ReplicaHeartbeat time.Duration `yaml:"replica_heartbeat"`
	// SlotLease is how long a lease outlives its last renewal; longer than ReplicaHeartbeat.
	SlotLease time.Duration `yaml:"slot_lease"`
	// ReplicaID names this replica; "" means hostname-pid (ReplicaIDOrDefault).
	ReplicaID string `yaml:"replica_id"`
}

// HTTP is the API, health and metrics listener.
type HTTP struct {
	Listen string `yaml:"listen"`
	// Token non-empty makes /v1 require "Authorization: Bearer <token>"; it is an admin token.
	Token     string `yaml:"token"`
	TokenFile string `yaml:"token_file"`
	// Tokens are named tokens with a role and an optional scope (docs/access.md).
	Tokens []APIToken `yaml:"tokens"`
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxSilencesPerToken and MaxStreamsPerToken are one named token's share of the stored silences and
	// of the live event streams, so one token cannot lock the other operators out (0 = the default).
	MaxSilencesPerToken int `yaml:"max_silences_per_token"`
	MaxStreamsPerToken  int `yaml:"max_streams_per_token"`
}

// Log is the zap logger's setup.
type Log struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // json | console
}

// Built-in defaults (docs/configuration.md and the tuning keys).
const (
	DefaultSlots             = 64
	DefaultKeyPrefix         = "hb"
	DefaultMaxClockSkew      = 5 * time.Second
	DefaultOfflineGrace      = 10 * time.Second
	DefaultIngestBatch       = 1024 // per-command costs spread over more signals (docs/benchmarks.md)
	DefaultIngestLinger      = 5 * time.Millisecond
	DefaultIngestMaxInFlight = 4
	DefaultMaxIdleWait       = 50 * time.Millisecond
	DefaultDetectionBatch    = 256
	DefaultScanners          = 4
	// DefaultKafkaSessionTimeout: Kafka brokers accept 6s–30min by default (group.min/max.session.timeout.ms).
	DefaultKafkaSessionTimeout = 10 * time.Second
	DefaultLease               = 30 * time.Second
	DefaultMaxPublishAttempts  = 10
	DefaultMaxLag              = 2 * time.Second
	DefaultStall               = time.Second
	DefaultMaxHoldBack         = 10 * time.Minute
	DefaultMaxClockOffset      = 250 * time.Millisecond
	DefaultWatchdogEvery       = 30 * time.Second
	DefaultSweepEvery          = 30 * time.Second
	DefaultParentWait          = 5 * time.Second
	DefaultReplicaHeartbeat    = time.Second
	DefaultSlotLease           = 3 * time.Second
	DefaultMaxBodyBytes        = 1 << 20
	DefaultSilencesPerToken    = 100
	DefaultStreamsPerToken     = 8
	DefaultShutdownTimeout     = 10 * time.Second
	// DefaultTopicPartitions bounds how many consumers of one group share the events topic.
	DefaultTopicPartitions = 12
	// DefaultTopicReplicationFactor: the topics outlive the loss of a broker. A one-broker cluster
	// refuses it; set 1 there.
	DefaultTopicReplicationFactor = 3

	// StallTick is how often heartbeatd checks that it is not paused; a stall shorter than MinStall could
	// not be told from a late tick.
	StallTick = 100 * time.Millisecond
	MinStall  = 3 * StallTick

	// MaxSlots is Redis Cluster's hash slot count: more deadline slots could not spread any further.
	MaxSlots = 16384
	// DefaultType is the policy every unknown or absent type gets; it must be configured.
	DefaultType = "default"
)

// Retention is how long heartbeatd remembers devices nobody expects.
type Retention struct {
	// ForgetAfter: a device silent this long and not registered is forgotten (counted, logged); 0 = never.
	ForgetAfter time.Duration `yaml:"forget_after"`
}

// DefaultForgetAfter is retention.forget_after's 30 days (docs/configuration.md).
const DefaultForgetAfter = 30 * 24 * time.Hour

// BuiltinPolicy is what `types.default` falls back to for fields it does not set (docs/configuration.md's values).
var BuiltinPolicy = Policy{Timeout: 60 * time.Second, RepeatEvery: 5 * time.Minute, MaxRepeats: 12}

// Default returns the built-in configuration, before any file: docs/configuration.md with no `types` (the file must
// name at least `default`).
func Default() *Config {
	return &Config{
		Redis: Redis{
			Addrs:     []string{"127.0.0.1:6379"},
			KeyPrefix: DefaultKeyPrefix,
			Slots:     DefaultSlots,
		},
		Ingest: Ingest{
			MaxClockSkew: DefaultMaxClockSkew,
			Batch:        DefaultIngestBatch,
			Linger:       DefaultIngestLinger,
			MaxInFlight:  DefaultIngestMaxInFlight,
			MaxLag:       DefaultMaxLag,
			OfflineGrace: DefaultOfflineGrace,
			MQTT: MQTT{
				Enabled: true,
				Brokers: []string{"tcp://127.0.0.1:1883"},
				QoS:     1,
				Subscriptions: []Subscription{
					{Topic: "devices/{device_id}/heartbeat"},
					{Topic: "fleet/{device_type}/{device_id}/telemetry"},
				},
				Probe: MQTTProbe{Enabled: true, Topic: DefaultMQTTProbeTopic},
			},
			Kafka: KafkaIngest{
				Brokers:        []string{"127.0.0.1:9092"},
				Topics:         []string{"device-signals"},
				GroupID:        "heartbeatd",
				SessionTimeout: DefaultKafkaSessionTimeout,
			},
		},
		Events: Events{Kafka: EventsKafka{
			Brokers:         []string{"127.0.0.1:9092"},
			Topic:           "heartbeat.events",
			DeadletterTopic: "heartbeat.deadletter",
			CreateTopics: CreateTopics{Enabled: true, Partitions: DefaultTopicPartitions,
				ReplicationFactor: DefaultTopicReplicationFactor},
		}},
		Detection: Detection{
			MaxIdleWait:        DefaultMaxIdleWait,
			Batch:              DefaultDetectionBatch,
			Scanners:           DefaultScanners,
			Lease:              DefaultLease,
			MaxPublishAttempts: DefaultMaxPublishAttempts,
			Stall:              DefaultStall,
			MaxHoldBack:        DefaultMaxHoldBack,
			MaxClockOffset:     DefaultMaxClockOffset,
			WatchdogEvery:      DefaultWatchdogEvery,
			SweepEvery:         DefaultSweepEvery,
			ParentWait:         DefaultParentWait,
		},
		Cluster: Cluster{
			ReplicaHeartbeat: DefaultReplicaHeartbeat,
			SlotLease:        DefaultSlotLease,
		},
		HTTP: HTTP{
			Listen:       "127.0.0.1:8080",
			MaxBodyBytes: DefaultMaxBodyBytes, MaxSilencesPerToken: DefaultSilencesPerToken, MaxStreamsPerToken: DefaultStreamsPerToken,
		},
		Log:         Log{Level: "info", Format: "json"},
		Correlation: Correlation{By: []string{}, MinDevices: DefaultCorrelationMinDevices, Window: DefaultCorrelationWindow},
		Retention:   Retention{ForgetAfter: DefaultForgetAfter},
		Notify:      Notify{GroupID: DefaultNotifyGroupID},
		History: History{MaxIncidents: DefaultHistoryMaxIncidents, Retention: DefaultHistoryRetention, GroupLabels: []string{},
			GroupID: DefaultHistoryGroupID},
		Metrics:         Metrics{MaxGroups: DefaultMetricsMaxGroups},
		ShutdownTimeout: DefaultShutdownTimeout,
	}
}

// deprecatedKeys maps each key still read under an old name to its new name. The reference config
// documents only the new one.
var deprecatedKeys = map[string]string{"detection.lag_threshold": "ingest.max_lag"}

// Deprecations lists the deprecated keys the configuration sets; the daemon logs each once at start.
func (c *Config) Deprecations() []Warning {
	var out []Warning
	if c.Detection.LagThreshold != nil {
		const key = "detection.lag_threshold"
		out = append(out, Warning{Key: key, Message: fmt.Sprintf("deprecated name of %s (now %s): write %[1]s instead",
			deprecatedKeys[key], FormatDuration(c.Ingest.MaxLag))})
	}
	return out
}
