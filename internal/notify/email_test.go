package notify

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

func TestEmailGoesThroughSTARTTLSAndAuthAndARefusalIsPermanent(t *testing.T) {
	smtp, files := testenv.StartSMTP(t)
	f := newFixture(t)
	block := `
notify:
  receivers:
    - name: mail
      email: {smarthost: "` + smtp.Addr + `", from: heartbeatd@example.com, to: [noc@example.com, oncall@example.com],
              username: heartbeatd, password: "${SMTP_PASSWORD}", tls: {enabled: true, ca_file: ` + files.CAFile + `}}
  routes:
    - {receiver: mail}
`
	n := f.notifyConfig(block, map[string]string{"SMTP_PASSWORD": "smtp-secret"})
	nt := f.newNotifier(n, nil)
	require.NoError(t, nt.Test(t.Context(), "mail"), "heartbeatd notify test --receiver mail")
	mails := smtp.Mails(t)
	require.Len(t, mails, 1)
	m := mails[0]
	assert.True(t, m.TLS, "STARTTLS before the message")
	assert.True(t, m.Auth, "authenticated")
	assert.Equal(t, "heartbeatd@example.com", m.From)
	assert.Equal(t, []string{"noc@example.com", "oncall@example.com"}, m.To)
	assert.Contains(t, m.Data, "Subject: heartbeatd: heartbeatd-test-device (test) interrupted")
	assert.Contains(t, m.Data, "site: test")

	// Through the consumer: an incident's opening and closing, each one mail.
	f.run(nt)
	open, closed := f.incident("pump-7", "pump", 1)
	f.publish(open, closed)
	require.Eventually(t, func() bool { return len(smtp.Mails(t)) == 3 }, waitFor, 50*time.Millisecond)
	assert.Contains(t, smtp.Mails(t)[2].Data, "pump-7 (pump) recovered after 1m30s")

	wrong := f.notifyConfig(block, map[string]string{"SMTP_PASSWORD": "not-the-password"})
	err := f.newNotifier(wrong, nil).Test(t.Context(), "mail")
	require.Error(t, err)
	assert.True(t, permanent(err), "a refused login is not retried: %v", err)

	rejected := f.notifyConfig(strings.Replace(block, "oncall@example.com", "reject@example.com", 1),
		map[string]string{"SMTP_PASSWORD": "smtp-secret"})
	err = f.newNotifier(rejected, nil).Test(t.Context(), "mail")
	require.Error(t, err)
	assert.True(t, permanent(err), "550 is permanent: %v", err)
	var de *DeliveryError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, 550, de.Status)

	later := f.notifyConfig(strings.Replace(block, "oncall@example.com", "later@example.com", 1),
		map[string]string{"SMTP_PASSWORD": "smtp-secret"})
	err = f.newNotifier(later, nil).Test(t.Context(), "mail")
	require.Error(t, err)
	assert.False(t, permanent(err), "451 is for a retry: %v", err)
	assert.Len(t, smtp.Mails(t), 3, "no refused message was accepted")
}

func TestMailWaitsForTheSMTPServerToComeBack(t *testing.T) {
	smtp, files := testenv.StartSMTP(t)
	f := newFixture(t)
	n := f.notifyConfig(`
notify:
  receivers:
    - name: mail
      email: {smarthost: "`+smtp.Addr+`", from: heartbeatd@example.com, to: [noc@example.com],
              username: heartbeatd, password: "${SMTP_PASSWORD}", tls: {enabled: true, ca_file: `+files.CAFile+`}}
  routes:
    - {receiver: mail}
`, map[string]string{"SMTP_PASSWORD": "smtp-secret"})
	nt := f.newNotifier(n, nil)
	f.run(nt)
	smtp.Stop(t)
	open, closed := f.incident("pump-9", "pump", 1)
	f.publish(open, closed)
	require.Eventually(t, func() bool {
		waiting, err := nt.store.Waiting(t.Context(), "mail")
		return err == nil && waiting == 1
	}, waitFor, 20*time.Millisecond, "kept in Redis while the server is down")
	smtp.Start(t)
	require.Eventually(t, func() bool { return smtp.MailCount(t) == 2 }, waitFor, 50*time.Millisecond)
	mails := smtp.Mails(t)
	assert.Contains(t, mails[0].Data, "pump-9 (pump) interrupted")
	assert.Contains(t, mails[1].Data, "pump-9 (pump) recovered")
}

func TestEveryReceiverKindSendsASummaryItsServerTakes(t *testing.T) {
	f := newFixture(t)
	n := f.notifyConfig(`
notify:
  receivers:
    - {name: pd, pagerduty: {routing_key: "${K}", url: "{{url}}/v2/enqueue"}}
    - {name: sl, slack: {webhook_url: "${SLACK}"}}
    - {name: wh, webhook: {url: "{{url}}/hook"}}
  routes:
    - {receiver: pd}
`, map[string]string{"K": "key", "SLACK": f.srv.URL + "/services/T0/B0/x"})
	nt := f.newNotifier(n, nil)
	sum := &Summary{Count: 37, Kinds: map[string]int{"interrupted": 30, "recovered": 7}, Devices: []string{"m-1", "m-2"},
		Since: time.Now().UTC()}
	for _, name := range []string{"pd", "sl", "wh"} {
		d := &Data{Event: event.Event{Kind: KindSummary, At: time.Now().UTC()}, Receiver: name, Summary: sum}
		require.NoError(t, nt.receivers[name].send(t.Context(), d), name)
	}
	pd := f.srv.pagerDuty()
	require.Len(t, pd, 1)
	assert.Equal(t, "warning", pd[0].Payload.Severity)
	assert.Contains(t, pd[0].Payload.Summary, "37 notifications folded by the rate limit (30 interrupted, 7 recovered), among them m-1, m-2")
	assert.Contains(t, f.srv.slackTexts()[0], "37 notifications folded")
	assert.Contains(t, f.srv.hookRequests()[0].Body, `"summary":{"count":37`)
}
