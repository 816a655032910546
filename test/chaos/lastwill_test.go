package chaos

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// willPayload is the last will the soak's will devices leave and the presence subscription takes.
const willPayload = "offline"

// willDevice is a soak device with an MQTT connection of its own and a last will on
// devices/<id>/status: dropping its connection without a DISCONNECT, as a lost network does, makes the
// broker publish the will, which heartbeatd reads as presence (docs/signals.md#presence).
type willDevice struct {
	id  string
	pub *publisher

	mu   sync.Mutex
	conn net.Conn // the connection paho dialled last
}

// willDevices connects n will devices, each reconnecting by itself after a drop or a broker outage.
func (f *fleet) willDevices(n int) []*willDevice {
	f.t.Helper()
	out := make([]*willDevice, n)
	for i := range out {
		w := &willDevice{id: "will-" + strconv.Itoa(i)}
		o := mqtt.NewClientOptions().SetClientID("soak-"+w.id).SetCleanSession(true).
			SetWill("devices/"+w.id+"/status", willPayload, 1, false).
			SetAutoReconnect(true).SetMaxReconnectInterval(250 * time.Millisecond).
			SetConnectRetry(true).SetConnectRetryInterval(250 * time.Millisecond).
			SetCustomOpenConnectionFn(func(uri *url.URL, _ mqtt.ClientOptions) (net.Conn, error) {
				c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(context.Background(), "tcp", uri.Host)
				w.mu.Lock()
				w.conn = c
				w.mu.Unlock()
				return c, err
			})
		w.pub = &publisher{sent: &f.signals, c: f.broker.Connect(f.t, o)}
		out[i] = w
	}
	return out
}

// drop closes the device's connection under its client, without a DISCONNECT: the broker publishes its
// will. The client reconnects by itself; the device stays silent as long as the soak keeps it so.
func (w *willDevice) drop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn != nil {
		_ = w.conn.Close()
	}
}

// presenceSubscription is the subscription that reads the will devices' last wills.
func presenceSubscription(sharedGroup string) string {
	s := `{topic: "devices/{device_id}/status", presence: offline, payload: ` + strconv.Quote(willPayload)
	if sharedGroup != "" {
		s += ", shared_group: " + strconv.Quote(sharedGroup)
	}
	return s + "}"
}
