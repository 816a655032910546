package devstack

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"go.uber.org/zap"
)

// The presence stories of the dev fleet (docs/signals.md), so that with the dev config the causes show
// within a minute:
//   - a pump reports a failure now and then (`"status": "fail"`, for pumpFailFor): INTERRUPTED with
//     cause reported at once, RECOVERED at its next telemetry;
//   - a device's connection drops without a goodbye: the broker publishes its last will ("offline" on
//     devices/<id>/status), and it is INTERRUPTED with cause offline ingest.offline_grace later; it
//     comes back, says "online" and RECOVERED follows.
const (
	failingPump   = "pump-7"
	pumpType      = "temperature-sensor"
	pumpInterval  = 2 * time.Second
	pumpFailFirst = 20 * time.Second // the first failure, then one every pumpFailEvery
	pumpFailFor   = 10 * time.Second // each lasts this long: every message then reports it
	pumpFailEvery = time.Minute
	pumpReason    = "pressure sensor stuck"

	willDevice   = "dev-lastwill"
	willInterval = 2 * time.Second
	willDropsAt  = 25 * time.Second // after each (re)connection
	willAwayFor  = 20 * time.Second // longer than the dev config's offline_grace (3s)
)

// failingPumpDevice is the pump of the story above: telemetry, with a failure now and then.
func failingPumpDevice() *simDevice {
	d := telemetryDevice(failingPump, pumpType, pumpInterval, 0, 80)
	d.failAt, d.failFor, d.failEvery = pumpFailFirst, pumpFailFor, pumpFailEvery
	return d
}

// failure is the message a device reporting a failure sends at t.
func failure(t time.Time) []byte {
	return fmt.Appendf(nil, `{"ts":%d,"status":"fail","reason":%q}`, t.UnixMilli(), pumpReason)
}

// runLastWill simulates the device of the last-will story on broker until ctx is done: heartbeats on
// devices/<id>/heartbeat with a will on devices/<id>/status, a connection dropped (closed under the
// client, as a lost network does) every willDropsAt, and a return willAwayFor later.
func runLastWill(ctx context.Context, broker string, log *zap.Logger) error {
	log = log.With(zap.String("component", "fleet"))
	status, heartbeat := "devices/"+willDevice+"/status", "devices/"+willDevice+"/heartbeat"
	for {
		var mu sync.Mutex
		var conn net.Conn
		o := paho.NewClientOptions().AddBroker(broker).SetClientID("heartbeatd-dev-"+willDevice).SetCleanSession(true).
			SetAutoReconnect(false).SetConnectTimeout(5*time.Second).SetWill(status, "offline", 1, false).
			SetCustomOpenConnectionFn(func(uri *url.URL, _ paho.ClientOptions) (net.Conn, error) {
				c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", uri.Host)
				mu.Lock()
				conn = c
				mu.Unlock()
				return c, err
			})
		client := paho.NewClient(o)
		if err := waitToken(ctx, client.Connect(), 10*time.Second); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("devstack: last-will device connect %s: %w", broker, err)
		}
		_ = waitToken(ctx, client.Publish(status, 1, false, "online"), 5*time.Second)
		drop := time.Now().Add(willDropsAt)
		tick := time.NewTicker(willInterval)
		for time.Now().Before(drop) && ctx.Err() == nil {
			_ = waitToken(ctx, client.Publish(heartbeat, 1, false, []byte(nil)), 5*time.Second)
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
		tick.Stop()
		if ctx.Err() != nil {
			client.Disconnect(250)
			return nil
		}
		log.Info(fmt.Sprintf("simulated device %s loses its connection: expect its last will, then INTERRUPTED (cause offline) after offline_grace", willDevice))
		mu.Lock()
		_ = conn.Close() // no DISCONNECT: the broker publishes the will
		mu.Unlock()
		client.Disconnect(0)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(willAwayFor):
		}
		log.Info(fmt.Sprintf("simulated device %s reconnects and says online: expect RECOVERED", willDevice))
	}
}
