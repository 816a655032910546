package testenv

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/heartbeatd/heartbeatd/api"
)

// SASLUser is a Kafka SASL account. Mechanism is "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512".
type SASLUser struct {
	Mechanism, User, Pass string
}

// KafkaOptions configures StartKafka.
type KafkaOptions struct {
	// Topics are created at start (and at every Start), with Partitions partitions (default 3).
	// Others are not created on demand: producing to them fails as it does on a broker with
	// auto.create.topics.enable=false.
	Topics     []string
	Partitions int
	// TLS makes the listener speak TLS only, with this server configuration (see TLSFiles.ServerConfig).
	TLS *tls.Config
	// ClientTLS is what ReadAll and Client use against a TLS listener (see TLSFiles.ClientConfig). When
	// TLS is set and ClientTLS is not, they skip verifying the server: they are there to read, not to
	// test TLS.
	ClientTLS *tls.Config
	// SASL users, all superusers; non-empty turns on SASL, and then a client without it is refused.
	// ReadAll and Client log in as the first.
	SASL []SASLUser
	// Persist keeps the cluster's data in its directory (kfake's DataDir) across Stop and Start.
	// Without it a restarted cluster is empty.
	Persist bool
	// BrokerConfigs are broker settings ("log.segment.bytes": "1048576"), as kfake.BrokerConfigs takes.
	BrokerConfigs map[string]string
}

// Kafka is an in-process kfake cluster of one broker on a fixed loopback port, so it can be stopped and
// started again at the same address.
type Kafka struct {
	Addrs []string // "127.0.0.1:port"

	opts    KafkaOptions
	ports   []int
	dir     string
	ownDir  bool // made by the launcher, removed by Close
	logPath string

	mu      sync.Mutex
	cluster *kfake.Cluster
	logFile *os.File
}

// LaunchKafka is StartKafka without a test (see the package comment for dir; the cluster logs there, and
// keeps its data there with Persist). It takes a context like the other launchers; kfake starts at once,
// in process.
func LaunchKafka(_ context.Context, dir string, opts KafkaOptions) (*Kafka, error) {
	k := &Kafka{opts: opts}
	if k.opts.Partitions <= 0 {
		k.opts.Partitions = 3
	}
	for _, u := range k.opts.SASL {
		switch u.Mechanism {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			return nil, fmt.Errorf("testenv: SASL mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", u.Mechanism)
		}
	}
	var err error
	if k.dir, k.ownDir, err = serverDir(dir, "kafka"); err != nil {
		return nil, err
	}
	k.logPath = filepath.Join(k.dir, "kfake.log")
	for range 5 {
		var port int
		if port, err = freePort(); err != nil {
			break
		}
		k.ports = []int{port}
		if err = k.start(); err == nil || !isAddrInUse(err) {
			break
		}
	}
	if err != nil {
		err = fmt.Errorf("testenv: start kafka: %w\n%s", err, logTail(k.logPath))
		k.Close()
		return nil, err
	}
	k.Addrs = k.cluster.ListenAddrs()
	return k, nil
}

func isAddrInUse(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "address already in use")
}

func (k *Kafka) start() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cluster != nil {
		return errors.New("already running")
	}
	logFile, err := os.OpenFile(k.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "--- testenv: kfake on ports %v (%s)\n", k.ports, time.Now().Format(time.RFC3339Nano))
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(k.ports...),
		kfake.ClusterID("heartbeatd-testenv"),
		kfake.WithLogger(kfake.BasicLogger(logFile, kfake.LogLevelWarn)),
	}
	if len(k.opts.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(k.opts.Partitions), k.opts.Topics...))
	}
	if k.opts.TLS != nil {
		opts = append(opts, kfake.TLS(k.opts.TLS))
	}
	if len(k.opts.SASL) > 0 {
		opts = append(opts, kfake.EnableSASL())
		for _, u := range k.opts.SASL {
			opts = append(opts, kfake.Superuser(u.Mechanism, u.User, u.Pass))
		}
	}
	if k.opts.Persist {
		opts = append(opts, kfake.DataDir(filepath.Join(k.dir, "data")))
	}
	if len(k.opts.BrokerConfigs) > 0 {
		opts = append(opts, kfake.BrokerConfigs(k.opts.BrokerConfigs))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		_ = logFile.Close()
		return err
	}
	k.cluster, k.logFile = c, logFile
	return nil
}

// Stop closes the cluster: the broker stops listening and connections drop. Stopping a stopped cluster
// does nothing.
func (k *Kafka) Stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cluster == nil {
		return
	}
	k.cluster.Close()
	// kfake's goroutines may still log a line after Close; writes to a closed file only fail.
	_ = k.logFile.Close()
	k.cluster, k.logFile = nil, nil
}

// Close stops the cluster and removes its directory when its launcher made it.
func (k *Kafka) Close() {
	k.Stop()
	if k.ownDir {
		_ = os.RemoveAll(k.dir)
	}
}

// Start starts a new cluster on the same port with the topics created again. The new cluster is empty
// (topics, offsets, groups) unless KafkaOptions.Persist is set. Starting a running cluster fails the test.
func (k *Kafka) Start(tb testing.TB) {
	tb.Helper()
	// The old listener is closed, but retry briefly in case the port is not free again yet.
	deadline := time.Now().Add(startTimeout)
	for {
		err := k.start()
		if err == nil {
			return
		}
		if !isAddrInUse(err) || time.Now().After(deadline) {
			tb.Fatalf("testenv: restart kafka on %v: %v\n%s", k.Addrs, err, logTail(k.logPath))
		}
		time.Sleep(pollInterval)
	}
}

// Cluster is the running kfake cluster, for kfake's own controls (faults, group inspection); nil while
// stopped.
func (k *Kafka) Cluster() *kfake.Cluster {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cluster
}

// StarveFetches makes the running cluster answer every fetch of topic with no records, after a pause as
// a broker throttling a consumer would, while on is set: the consumer stays connected and in its group,
// and records pile up behind it. A restarted cluster forgets it.
func (k *Kafka) StarveFetches(topic string, on *atomic.Bool) {
	c := k.Cluster()
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.FetchRequest)
		if !on.Load() || len(r.Topics) == 0 || r.Topics[0].Topic != topic {
			return nil, nil, false
		}
		c.SleepControl(func() { time.Sleep(100 * time.Millisecond) })
		resp := r.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range r.Topics {
			t := kmsg.NewFetchResponseTopic()
			t.Topic, t.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				p := kmsg.NewFetchResponseTopicPartition()
				p.Partition, p.HighWatermark, p.LastStableOffset = rp.Partition, rp.FetchOffset, rp.FetchOffset
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
}

// ClientOpts are the franz-go options to reach the cluster: seed brokers, TLS and SASL as configured.
func (k *Kafka) ClientOpts() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(k.Addrs...)}
	if k.opts.TLS != nil {
		c := k.opts.ClientTLS
		if c == nil {
			c = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // a test reader, see KafkaOptions.ClientTLS
		}
		opts = append(opts, kgo.DialTLSConfig(c.Clone()))
	}
	if len(k.opts.SASL) > 0 {
		opts = append(opts, kgo.SASL(SASLMechanism(k.opts.SASL[0])))
	}
	return opts
}

// SASLMechanism is the franz-go mechanism logging in as u.
func SASLMechanism(u SASLUser) sasl.Mechanism {
	switch u.Mechanism {
	case "PLAIN":
		return plain.Auth{User: u.User, Pass: u.Pass}.AsMechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: u.User, Pass: u.Pass}.AsSha512Mechanism()
	default:
		return scram.Auth{User: u.User, Pass: u.Pass}.AsSha256Mechanism()
	}
}

// Client is a franz-go client for the cluster (ClientOpts, then opts), closed by tb.Cleanup.
func (k *Kafka) Client(tb testing.TB, opts ...kgo.Opt) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(append(k.ClientOpts(), opts...)...)
	if err != nil {
		tb.Fatalf("testenv: kafka client: %v", err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// Partitions is how many partitions each of topics has, asked with a client independent of the code
// under test; a topic that does not exist is absent.
func (k *Kafka) Partitions(tb testing.TB, topics ...string) map[string]int {
	tb.Helper()
	req := kmsg.NewPtrMetadataRequest()
	for _, name := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
	}
	res, err := req.RequestWith(context.Background(), k.Client(tb))
	if err != nil {
		tb.Fatalf("testenv: kafka metadata of %v: %v", topics, err)
	}
	out := map[string]int{}
	for _, rt := range res.Topics {
		if rt.ErrorCode == 0 && rt.Topic != nil {
			out[*rt.Topic] = len(rt.Partitions)
		}
	}
	return out
}

// Consume reads topics from their start on a client of its own and hands every record to handle, on one
// goroutine, until tb ends.
func (k *Kafka) Consume(tb testing.TB, handle func(Record), topics ...string) {
	tb.Helper()
	cl := k.Client(tb, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		errs := 0
		for ctx.Err() == nil {
			fetches := cl.PollFetches(ctx)
			fetches.EachError(func(t string, p int32, err error) {
				// The client retries; the first few say why a partition's records may come late.
				if ctx.Err() == nil && errs < 10 {
					errs++
					tb.Logf("testenv: consuming %s[%d]: %v", t, p, err)
				}
			})
			fetches.EachRecord(func(r *kgo.Record) {
				checkContract(tb, r)
				handle(record(r))
			})
		}
	}()
	// Registered after Client's own cleanup, so it runs first: the poller ends before the client closes.
	tb.Cleanup(func() { cancel(); <-done })
}

// Record is one Kafka record as ReadAll and Consume hand it over.
type Record struct {
	Topic      string
	Key, Value []byte
	Headers    []kgo.RecordHeader
	Partition  int32
	Offset     int64
}

func record(r *kgo.Record) Record {
	return Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers, Partition: r.Partition, Offset: r.Offset}
}

// The topics whose records ReadAll, ReadUntil and Consume check against heartbeatd's published contract
// (package api): the configuration's defaults, which every suite uses. An event must be valid against
// api/event.schema.json, declare no other field, and carry CloudEvents headers that agree with it; a
// dead letter must be valid against api/deadletter.schema.json and declare no other field. A record
// that is not fails the test that read it, so the schemas cannot drift from what the code writes.
const (
	EventsTopic     = "heartbeat.events"
	DeadLetterTopic = "heartbeat.deadletter"
)

// SignalsTopic is the configuration's default Kafka ingest topic, which the suites that signal over Kafka
// use.
const SignalsTopic = "device-signals"

// checkContract fails tb (Errorf: it may run on Consume's goroutine) for a record of EventsTopic or
// DeadLetterTopic that breaks the published contract.
func checkContract(tb testing.TB, r *kgo.Record) {
	tb.Helper()
	var err error
	switch r.Topic {
	case EventsTopic:
		err = api.ValidateEventClosed(r.Value)
		if err == nil {
			err = checkEventHeaders(r)
		}
	case DeadLetterTopic:
		err = api.ValidateDeadLetterClosed(r.Value)
	default:
		return
	}
	if err != nil {
		value := string(r.Value)
		if len(value) > 512 {
			value = value[:512] + "…"
		}
		tb.Errorf("testenv: %s[%d] offset %d (key %q) breaks the published contract: %v\nvalue: %s",
			r.Topic, r.Partition, r.Offset, r.Key, err, value)
	}
}

func checkEventHeaders(r *kgo.Record) error {
	headers := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		if _, dup := headers[h.Key]; dup {
			return fmt.Errorf("header %s twice", h.Key)
		}
		headers[h.Key] = string(h.Value)
	}
	var e struct {
		DeviceID string `json:"device_id"`
	}
	if err := json.Unmarshal(r.Value, &e); err != nil {
		return err
	}
	if string(r.Key) != e.DeviceID {
		return fmt.Errorf("message key %q is not the event's device_id %q", r.Key, e.DeviceID)
	}
	return api.ValidateEventHeaders(headers, r.Value)
}

// ReadAll reads topic from the beginning of every partition until it has at least min records or timeout
// passes, and returns what it read (in fetch order: ordered within a partition). It does not fail the
// test on a short read, so the caller's assertion says what was expected; it logs why it stopped. With
// min <= 0 it reads for the whole timeout.
func (k *Kafka) ReadAll(tb testing.TB, topic string, min int, timeout time.Duration) []Record {
	tb.Helper()
	out, lastErr := k.read(tb, topic, timeout, func(recs []Record) bool { return min > 0 && len(recs) >= min })
	if min > 0 && len(out) < min {
		tb.Logf("testenv: ReadAll %s: %d of %d records within %v (last fetch error: %v)", topic, len(out), min, timeout, lastErr)
	}
	return out
}

// ReadUntil reads topic as ReadAll does until enough says so of what it read so far (asked after every
// fetch, on the caller's goroutine) or timeout passes, and returns what it read.
func (k *Kafka) ReadUntil(tb testing.TB, topic string, timeout time.Duration, enough func([]Record) bool) []Record {
	tb.Helper()
	out, _ := k.read(tb, topic, timeout, enough)
	return out
}

// read is ReadAll and ReadUntil, with the last fetch error.
func (k *Kafka) read(tb testing.TB, topic string, timeout time.Duration, enough func([]Record) bool) ([]Record, error) {
	tb.Helper()
	cl, err := kgo.NewClient(append(k.ClientOpts(),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		tb.Fatalf("testenv: kafka client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []Record
	var lastErr error
	for !enough(out) {
		fetches := cl.PollFetches(ctx)
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				lastErr = fmt.Errorf("%s[%d]: %w", t, p, err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			checkContract(tb, r)
			out = append(out, record(r))
		})
		if ctx.Err() != nil {
			break
		}
	}
	return out, lastErr
}

// StartKafka starts a kfake cluster with the topics, closed by tb.Cleanup.
func StartKafka(tb testing.TB, opts ...KafkaOptions) *Kafka {
	tb.Helper()
	return start(tb, LaunchKafka, opts)
}
