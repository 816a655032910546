package notify

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readyErrs is one round of Ready with a short bound, as /readyz's background check runs it.
func readyErrs(nt *Notifier) map[string]error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return nt.Ready(ctx)
}

// A notifier is ready once it is a member of its group, and not while the partitions it holds fall
// behind: here a receiver that hangs holds the reader on one event while more arrive.
func TestANotifierIsReadyOnceInItsGroupAndNotWhileFarBehind(t *testing.T) {
	f := newFixture(t)
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hanging.Close)
	t.Cleanup(func() { closeOnce(release) })
	n := f.notifyConfig(`
notify:
  receivers:
    - {name: slow, webhook: {url: "`+hanging.URL+`"}, timeout: 1m, rate: 1000/s, burst: 1000}
  routes:
    - {receiver: slow}
`, nil)
	nt := f.newNotifier(n, nil)
	nt.readyBehind = 5

	before := readyErrs(nt)
	assert.NoError(t, before["redis"])
	require.ErrorContains(t, before["events"], "not (yet) a member of consumer group", "not running yet")

	f.run(nt)
	require.Eventually(t, func() bool { return readyErrs(nt)["events"] == nil }, waitFor, 100*time.Millisecond,
		"never ready: %v", readyErrs(nt))

	// One device's stream: the first blocks on the receiver, the rest wait behind it unread.
	var err error
	for _, d := range devices("dev", 20) {
		open, _ := f.incident(d, "meter", 1)
		f.publish(open)
	}
	require.Eventually(t, func() bool {
		err = readyErrs(nt)["events"]
		return err != nil
	}, waitFor, 100*time.Millisecond)
	assert.ErrorContains(t, err, "records behind")
	assert.ErrorContains(t, err, "(at most 5)")

	closeOnce(release)
	require.Eventually(t, func() bool { return readyErrs(nt)["events"] == nil }, waitFor, 100*time.Millisecond,
		"not ready again once caught up: %v", readyErrs(nt))
}

func TestANotifierWhoseRedisDoesNotAnswerIsNotReady(t *testing.T) {
	f := newFixture(t)
	n := f.notifyConfig(ticketsWebhook, nil)
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = dead.Close() })
	nt, err := New(Options{Notify: n, Brokers: f.kafka.Addrs, Topic: "heartbeat.events", Redis: dead})
	require.NoError(t, err)
	assert.Error(t, readyErrs(nt)["redis"])
}

// closeOnce closes c unless it is closed.
func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}
