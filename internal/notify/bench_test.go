package notify

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// waitCount waits until the recording server holds n notifications, failing b past waitFor rather
// than spinning for good when a notification is lost.
func waitCount(b *testing.B, count func() int, n int) {
	b.Helper()
	require.Eventually(b, func() bool { return count() >= n }, waitFor, time.Millisecond, "%d notifications recorded", n)
}

// BenchmarkNotificationsPerSecond measures, per receiver kind, how many notifications one notifier
// process delivers through the whole path (Kafka read, routing, the incident bookkeeping in Redis, the
// send, the commit) to a local recording server; and, in the same run, how many the receiver alone
// sends one after another to the same server (direct_sends/s), the baseline of the ratio of_direct.
//
//	go test -run '^$' -bench NotificationsPerSecond -benchtime 2000x ./internal/notify/
func BenchmarkNotificationsPerSecond(b *testing.B) {
	for _, kind := range []string{"pagerduty", "slack", "webhook", "email"} {
		b.Run(kind, func(b *testing.B) {
			f := newFixture(b)
			var count func() int
			var receiver string
			switch kind {
			case "pagerduty":
				receiver = `{name: r, pagerduty: {routing_key: "${K}", url: "{{url}}/v2/enqueue"}`
				count = func() int { return len(f.srv.pagerDuty()) }
			case "slack":
				receiver = `{name: r, slack: {webhook_url: "${SLACK}"}`
				count = func() int { return len(f.srv.slackTexts()) }
			case "webhook":
				receiver = `{name: r, webhook: {url: "{{url}}/hook"}`
				count = func() int { return len(f.srv.hookRequests()) }
			case "email":
				smtp, files := testenv.StartSMTP(b)
				receiver = fmt.Sprintf(`{name: r, email: {smarthost: %q, from: a@example.com, to: [b@example.com], `+
					`username: heartbeatd, password: "${K}", tls: {enabled: true, ca_file: %s}}`, smtp.Addr, files.CAFile)
				count = func() int { return smtp.MailCount(b) }
			}
			n := f.notifyConfig(`
notify:
  receivers:
    - `+receiver+`, rate: 1000000/s, burst: 1000000}
  routes:
    - {receiver: r}
`, map[string]string{"K": "smtp-secret", "SLACK": f.srv.URL + "/services/T0/B0/x"})
			nt := f.newNotifier(n, nil)
			events := make([]event.Event, b.N)
			for i := range events {
				events[i], _ = f.incident(fmt.Sprintf("dev-%d", i), "meter", 1)
			}

			// The baseline: the receiver alone, the same notifications one after another.
			out := nt.receivers["r"]
			start := time.Now()
			for i := range events {
				d := &Data{Event: events[i], Receiver: "r", Incident: events[i].ID}
				require.NoError(b, out.send(context.Background(), d))
			}
			direct := float64(b.N) / time.Since(start).Seconds()
			before := count()

			// A first notification through the notifier, so its group is joined before the timer starts.
			f.run(nt)
			warm, _ := f.incident("warm-up", "meter", 1)
			f.publish(warm)
			waitCount(b, count, before+1)
			b.ResetTimer()
			start = time.Now()
			f.publish(events...)
			waitCount(b, count, before+1+b.N)
			elapsed := time.Since(start)
			b.StopTimer()
			perSecond := float64(b.N) / elapsed.Seconds()
			b.ReportMetric(perSecond, "notifications/s")
			b.ReportMetric(direct, "direct_sends/s")
			b.ReportMetric(perSecond/direct, "of_direct")
		})
	}
}
