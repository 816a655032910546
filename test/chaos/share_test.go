package chaos

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// Replicas that split the signals between them (an MQTT shared subscription, one Kafka consumer group)
// each read a share nobody else reads. These scenarios take a share away: a replica killed, a consumer
// starved of records.

// killOneOfTwo starts replicas a and b with o's options under their names, makes keepers signal through
// sig (nil: MQTT) and silent devices expire through it, SIGKILLs a in the middle of the expiry and
// tallies as scenario name what the survivor b reports. It returns b.
func killOneOfTwo(t *testing.T, name string, sig func(*fleet) signaller, o daemonOptions) *testenv.Heartbeatd {
	t.Helper()
	s, keepVia, a, b := twoSharing(t, sig, o)
	s.keepersVia(keepVia, 10)
	sent := paced(s.p, s.silent, timeout)
	s.awaitQuarter()
	a.Kill(t)
	require.NoError(t, <-sent)
	s.finish(name, name, 30*time.Second)
	return b
}

// twoSharing starts replicas a and b with o's options under their names, and a scenario watched on b
// whose devices signal through sig (nil: MQTT); keepVia is a second signaller of sig's kind for keepers
// (nil with MQTT: keepers get a publisher of their own).
func twoSharing(t *testing.T, sig func(*fleet) signaller, o daemonOptions) (s *scenario, keepVia signaller, a, b *testenv.Heartbeatd) {
	t.Helper()
	f := startFleet(t)
	o.replica = "replica-a"
	a = f.startDaemon(o)
	o.replica = "replica-b"
	b = f.startDaemon(o)
	s = &scenario{fleet: f, n: fleetSize(t), hb: b, silent: ids("silent", fleetSize(t))}
	if sig != nil {
		s.p, keepVia = sig(f), sig(f)
	} else {
		s.p = f.publisher("devices")
	}
	return s, keepVia, a, b
}

// TestChaosReplicaKillMQTTShared: two replicas in one MQTT shared group (README's advice for splitting
// MQTT load), one SIGKILLed while keepers signal and devices expire. With persistent sessions mosquitto
// went on routing every other message of the group to the dead replica's session, and the survivor
// reported most keepers within seconds. With clean sessions the broker hands the dead share over at
// once; what the dead replica held is lost, and the survivor holds detection back from its last word
// until it has taken the dead session over.
func TestChaosReplicaKillMQTTShared(t *testing.T) {
	b := killOneOfTwo(t, "replica_kill_mqtt_shared", nil, daemonOptions{sharedGroup: "heartbeatd"})
	log := b.Log()
	require.Contains(t, log, "replica replica-a stopped answering while reading mqtt:$share/heartbeatd/devices/+/heartbeat")
	require.Contains(t, log, "took over the MQTT session of a dead replica")
}

// TestChaosReplicaKillKafkaGroup: two replicas in one Kafka consumer group, one SIGKILLed while keepers
// signal over Kafka and devices expire. The dead member's partitions go unread until the coordinator
// expels it (session_timeout 6s); the survivor holds detection back from the dead replica's last word
// until the group has rebalanced without it and read its partitions past that.
func TestChaosReplicaKillKafkaGroup(t *testing.T) {
	overKafka := func(f *fleet) signaller { return f.kafkaSignaller() }
	b := killOneOfTwo(t, "replica_kill_kafka_group", overKafka, daemonOptions{kafkaIngest: true, kafkaGroup: "chaos-replicas"})
	require.Contains(t, b.Log(), "replica replica-a stopped answering while reading kafka:chaos-replicas")
}

// TestChaosReplicaKillKafkaGroupFirstWords: devices heartbeatd never heard of signal once, right after one
// of two replicas in a Kafka group was SIGKILLed, and fall silent. The signals on the dead replica's
// partitions are read only once the group has expelled it, past their 2s timeout: late. They are the
// only word of those devices, and each must still be reported interrupted, not dropped as late and the
// device never known.
func TestChaosReplicaKillKafkaGroupFirstWords(t *testing.T) {
	f := startFleet(t)
	o := daemonOptions{kafkaIngest: true, kafkaGroup: "chaos-replicas"}
	o.replica = "replica-a"
	a := f.startDaemon(o)
	o.replica = "replica-b"
	b := f.startDaemon(o)
	a.Kill(t)
	newcomers := f.barrier(f.kafkaSignaller(), "replica_kill_kafka_first_words", 30*time.Second)
	r := f.events.tallyInterrupted("replica_kill_kafka_first_words", len(newcomers), newcomers)
	report(t, r, func() string { return explainLost(b, r.lostIDs) }, b.LogTail)
}

// TestChaosReplicaKillMQTTSharedFirstWords: devices heartbeatd never heard of signal once over MQTT, right
// after one of two replicas sharing a subscription was SIGKILLed, and fall silent. The broker may have
// sent some of those signals to the dead replica's session; the survivor takes that session over and
// reads them late. Each device must still be reported interrupted.
func TestChaosReplicaKillMQTTSharedFirstWords(t *testing.T) {
	f := startFleet(t)
	o := daemonOptions{sharedGroup: "heartbeatd"}
	o.replica = "replica-a"
	a := f.startDaemon(o)
	o.replica = "replica-b"
	b := f.startDaemon(o)
	a.Kill(t)
	newcomers := f.barrier(f.publisher("first-words"), "replica_kill_mqtt_first_words", 30*time.Second)
	r := f.events.tallyInterrupted("replica_kill_mqtt_first_words", len(newcomers), newcomers)
	report(t, r, func() string { return explainLost(b, r.lostIDs) }, b.LogTail)
}

// TestChaosKafkaLag starves heartbeatd's Kafka consumer of records for longer than the timeout while
// keepers go on producing: a backlog older than the timeout, with nothing fetched and nothing waiting in
// ingest, so nothing a replica holds shows it. The group's end offsets against its committed ones do: detection holds back from where the lag began, no keeper is reported, and
// once the backlog is read the silent devices are.
func TestChaosKafkaLag(t *testing.T) {
	s := startScenario(t, daemonOptions{kafkaIngest: true})
	s.p = s.kafkaSignaller()
	keepers := s.keepersVia(s.p, 10)
	require.NoError(t, s.p.signal(s.silent, nil))
	s.awaitStored(keepers)

	var starved atomic.Bool
	s.kafka.StarveFetches(signalsTopic, &starved)
	starved.Store(true)
	time.Sleep(2*timeout + timeout/2) // the fault itself: a backlog older than the timeout
	during, err := getStats(s.hb)
	require.NoError(t, err)
	starved.Store(false)
	s.finish("kafka_lag", "kafka-lag", 30*time.Second)
	require.True(t, during.HoldBack.Active, "held back while the backlog grew")
	require.Contains(t, s.hb.Log(), "lagging")
}
