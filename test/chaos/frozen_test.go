package chaos

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestChaosRedisFrozen freezes redis-server with SIGSTOP for three timeouts (a paused VM, a disk that
// stalls under appendfsync always) while keepers signal and devices expire, then resumes it. Unlike a
// restart nothing is refused: the connections stay open and every command waits, the signal writes and
// the claims alike, and once resumed Redis runs what queued on each connection in whatever order the
// connections come. No keeper may be reported and every silent device must be, with one replica and with
// two that split the signals between them (an MQTT shared group, a Kafka consumer group: each
// replica writes only its share).
func TestChaosRedisFrozen(t *testing.T) {
	t.Run("one_replica", func(t *testing.T) {
		s := startScenario(t, daemonOptions{})
		redisFrozen(s, "redis_frozen", nil, s.hb)
	})
	t.Run("shared_mqtt", func(t *testing.T) {
		s, keepVia, a, b := twoSharing(t, nil, daemonOptions{sharedGroup: "heartbeatd"})
		redisFrozen(s, "redis_frozen_shared_mqtt", keepVia, a, b)
	})
	t.Run("kafka_group", func(t *testing.T) {
		overKafka := func(f *fleet) signaller { return f.kafkaSignaller() }
		s, keepVia, a, b := twoSharing(t, overKafka, daemonOptions{kafkaIngest: true, kafkaGroup: "chaos-replicas"})
		redisFrozen(s, "redis_frozen_kafka_group", keepVia, a, b)
	})
}

// redisFrozen is one case of TestChaosRedisFrozen: keepers signal through keepVia (nil: MQTT); replicas
// are every daemon of s.
func redisFrozen(s *scenario, name string, keepVia signaller, replicas ...*testenv.Heartbeatd) {
	t := s.t
	s.keepersVia(keepVia, 2)
	sent := paced(s.p, s.silent, timeout)
	s.firstInterruption()
	freeze(t, s.redis.PID(), 3*timeout, func() {
		for _, hb := range replicas {
			require.True(t, poll(30*time.Second, func() bool {
				code, _, _ := hb.Get("/readyz")
				return code != http.StatusOK
			}), "readyz stayed 200 with Redis frozen\n%s", hb.LogTail())
		}
	})
	require.NoError(t, <-sent)
	for _, hb := range replicas {
		waitReady(t, hb)
	}
	s.finish(name, "redis", 30*time.Second)
}

// freeze stops process pid with SIGSTOP for d (a paused VM, a hung process: its connections stay open
// and answer nothing), runs during meanwhile, and resumes it.
func freeze(t *testing.T, pid int, d time.Duration, during func()) {
	t.Helper()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	frozen := time.Now()
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	if during != nil {
		during()
	}
	time.Sleep(time.Until(frozen.Add(d))) // the freeze's length is the fault itself
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
}
