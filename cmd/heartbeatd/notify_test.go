package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// hookLog records the event ids a webhook receiver got, in order.
type hookLog struct {
	mu  sync.Mutex
	ids []string
}

func (h *hookLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var d struct {
		Event event.Event `json:"event"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.ids = append(h.ids, d.Event.ID)
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookLog) received() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ids...)
}

func notifyConfig(redisAddr string, brokers []string, hookURL string) string {
	return fmt.Sprintf(`
redis: {addrs: [%q]}
types: {default: {timeout: 60s}}
events: {kafka: {brokers: [%q]}}
notify:
  receivers:
    - {name: tickets, webhook: {url: %q}, rate: 10000/s, burst: 10000}
  routes:
    - {receiver: tickets}
`, redisAddr, brokers[0], hookURL)
}

func TestNotifyTestSendsASampleEventToTheReceiver(t *testing.T) {
	hooks := &hookLog{}
	srv := httptest.NewServer(hooks)
	t.Cleanup(srv.Close)
	path := filepath.Join(t.TempDir(), "heartbeatd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(notifyConfig("127.0.0.1:1", []string{"127.0.0.1:1"}, srv.URL)), 0o600))

	code, stdout, stderr := runBinary(t, nil, "notify", "test", "--receiver", "tickets", "-config", path)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, "sent a sample event to tickets")
	require.Len(t, hooks.received(), 1)
	assert.Contains(t, hooks.received()[0], "heartbeatd-test-device/")

	code, _, stderr = runBinary(t, nil, "notify", "test", "--receiver", "nobody", "-config", path)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `no receiver "nobody"`)
}

// The notifier as its own process, killed (SIGKILL) in the middle of a stream of events: the next run
// starts from the committed offset, so every event reaches the receiver at least once.
func TestNotifyKilledMidStreamLosesNoNotification(t *testing.T) {
	redisSrv := testenv.StartRedis(t)
	k := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{testenv.EventsTopic, testenv.DeadLetterTopic}})
	hooks := &hookLog{}
	srv := httptest.NewServer(hooks)
	t.Cleanup(srv.Close)
	nt := testenv.StartHeartbeatd(t, testenv.HeartbeatdOptions{Notify: true, Config: notifyConfig(redisSrv.Addr, k.Addrs, srv.URL)})
	producer := k.Client(t, kgo.DefaultProduceTopic(testenv.EventsTopic))
	publish := func(events ...event.Event) {
		recs := make([]*kgo.Record, len(events))
		for i, e := range events {
			b, err := json.Marshal(e)
			require.NoError(t, err)
			recs[i] = &kgo.Record{Key: []byte(e.DeviceID), Value: b}
		}
		require.NoError(t, producer.ProduceSync(context.Background(), recs...).FirstErr())
	}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)

	// A new group starts at the topic's end: probe until the notifier has joined and reads.
	probes := 0
	require.Eventually(t, func() bool {
		if len(hooks.received()) > 0 {
			return true
		}
		probes++
		publish(event.New(event.Interrupted, fmt.Sprintf("probe-%d", probes), "default", t0, t0.Add(-time.Minute), t0, 0))
		return false
	}, time.Minute, time.Second, "the notifier never read\n%s", nt.LogTail())

	var want []string
	var events []event.Event
	for i := range 300 {
		dev := fmt.Sprintf("dev-%d", i)
		dl := t0.Add(time.Minute)
		open := event.New(event.Interrupted, dev, "default", dl, dl.Add(-time.Minute), dl, 0)
		closed := event.New(event.Recovered, dev, "default", dl, dl.Add(-time.Minute), dl.Add(time.Minute), 0)
		events = append(events, open, closed)
		want = append(want, open.ID, closed.ID)
	}
	publish(events...)
	before := len(hooks.received())
	require.Eventually(t, func() bool { return len(hooks.received()) >= before+50 }, time.Minute, time.Millisecond)
	nt.Kill(t)
	atKill := len(hooks.received())
	require.Less(t, atKill-before, len(want), "killed before the end")
	nt.Start(t)

	require.Eventually(t, func() bool {
		got := map[string]bool{}
		for _, id := range hooks.received() {
			got[id] = true
		}
		for _, id := range want {
			if !got[id] {
				return false
			}
		}
		return true
	}, 2*time.Minute, 100*time.Millisecond, "every event reached the receiver\n%s", nt.LogTail())
	t.Logf("%d notifications before the kill, %d in all for %d events (resends allowed)", atKill-before,
		len(hooks.received())-before, len(want))
	require.False(t, strings.Contains(nt.Log(), "panic"), nt.LogTail())
}

// `heartbeatd notify` answers /readyz: ready once it has joined its consumer group (its share of the
// events topic assigned) and Redis answers; not ready, naming the check, while Redis is down.
func TestNotifyAnswersReadyzOnceInItsGroupAndNotWithoutRedis(t *testing.T) {
	redisSrv := testenv.StartRedis(t)
	k := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{testenv.EventsTopic, testenv.DeadLetterTopic}})
	srv := httptest.NewServer(&hookLog{})
	t.Cleanup(srv.Close)
	nt := testenv.StartHeartbeatd(t, testenv.HeartbeatdOptions{Notify: true, Config: notifyConfig(redisSrv.Addr, k.Addrs, srv.URL)})
	require.NoError(t, nt.AwaitReady(context.Background(), time.Minute), nt.LogTail())
	readyz := func() (int, map[string]string) {
		code, body, err := nt.Get("/readyz")
		require.NoError(t, err)
		var v map[string]string
		require.NoError(t, json.Unmarshal([]byte(body), &v), body)
		return code, v
	}
	code, body := readyz()
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, map[string]string{"status": "ready", "redis": "ok", "events": "ok"}, body)

	redisSrv.Stop(t)
	require.Eventually(t, func() bool { code, body = readyz(); return code == http.StatusServiceUnavailable }, 30*time.Second,
		50*time.Millisecond, "still ready without Redis: %v", body)
	assert.Equal(t, "not ready", body["redis"])
	assert.Contains(t, nt.Log(), "not ready")
	redisSrv.Start(t)
	require.NoError(t, nt.AwaitReady(context.Background(), time.Minute), nt.LogTail())
}
