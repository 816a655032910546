// Package statuspage drives the fleet status page in headless Chromium against the real heartbeatd
// binary on real redis-server, mosquitto and kfake: what an operator sees and does, end to end.
package statuspage

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

const token = "page-test-token"

// hostile is a device id that is HTML: the page must show it as text.
const hostile = `<img src=x onerror=alert(1)>`

// fleet is heartbeatd on real servers with an MQTT client to signal as devices.
type fleet struct {
	hb     *testenv.Heartbeatd
	device mqtt.Client
}

// startFleet starts heartbeatd on new servers with the token and the given types section; seed, when
// set, writes to Redis before heartbeatd starts; env adds to heartbeatd's environment.
func startFleet(tb testing.TB, slots int, types string, seed func(redisAddr string), env ...string) *fleet {
	tb.Helper()
	redis, broker := testenv.StartRedis(tb), testenv.StartMosquitto(tb)
	kafka := testenv.StartKafka(tb, testenv.KafkaOptions{Topics: []string{"heartbeat.events", "heartbeat.deadletter"}})
	if seed != nil {
		seed(redis.Addr)
	}
	servers := testenv.HeartbeatdConfig{Redis: redis.Addr, Slots: slots, MQTT: broker.Addr, ClientID: "statuspage-test", Kafka: kafka.Addrs}
	f := &fleet{hb: testenv.StartHeartbeatd(tb, testenv.HeartbeatdOptions{Config: servers.YAML(types + `
detection: {grace_after_outage: 100ms}
log: {level: info, format: console}
`), Env: append([]string{"HEARTBEATD_HTTP_TOKEN=" + token}, env...)})}
	require.NoError(tb, f.hb.AwaitReady(context.Background(), 60*time.Second), f.hb.LogTail())
	f.device = broker.Connect(tb, mqtt.NewClientOptions().SetClientID("statuspage-device"))
	return f
}

// signal sends one heartbeat for each device: with the 1s timeout, each is interrupted a second later.
func (f *fleet) signal(t testing.TB, devices ...string) {
	t.Helper()
	for _, d := range devices {
		tok := f.device.Publish("devices/"+d+"/heartbeat", 1, false, "")
		require.True(t, tok.WaitTimeout(10*time.Second))
		require.NoError(t, tok.Error())
	}
}

// call sends a request to the API with the token: the status, the body and how long the answer took.
func (f *fleet) call(t testing.TB, method, path, body string) (int, []byte, time.Duration) {
	t.Helper()
	req, err := http.NewRequest(method, f.hb.HTTP+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, answer, time.Since(start)
}

// get reads a 200 JSON answer of the API into v and returns how long it took.
func (f *fleet) get(t testing.TB, path string, v any) time.Duration {
	t.Helper()
	status, body, took := f.call(t, http.MethodGet, path, "")
	require.Equal(t, http.StatusOK, status, "%s: %s", path, body)
	require.NoError(t, json.Unmarshal(body, v))
	return took
}

// status is the status of the API's answer to GET path.
func (f *fleet) status(t testing.TB, path string) int {
	t.Helper()
	status, _, _ := f.call(t, http.MethodGet, path, "")
	return status
}

// awaitInterrupted waits until the API counts n interrupted devices.
func (f *fleet) awaitInterrupted(t testing.TB, n int64) {
	t.Helper()
	var stats struct{ Devices struct{ Interrupted int64 } }
	require.Eventually(t, func() bool {
		f.get(t, "/v1/stats", &stats)
		return stats.Devices.Interrupted == n
	}, 60*time.Second, 50*time.Millisecond, "%d interrupted devices\n%s", n, f.hb.LogTail())
}

// chromium finds the browser: HB_CHROMIUM, else chromium or google-chrome on PATH. Missing, the test
// skips on a developer machine and fails with CI=true (testenv.Need).
func chromium(t testing.TB) string {
	t.Helper()
	names := []string{"chromium", "chromium-browser", "google-chrome"}
	if p := os.Getenv("HB_CHROMIUM"); p != "" {
		names = []string{p}
	}
	var err error
	for _, name := range names {
		var p string
		if p, err = exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Need(t, "chromium (for the status page test; HB_CHROMIUM names another browser)", err)
	return ""
}

// browser is one headless tab, and the console errors the page raised in it.
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	problems []string
}

func newBrowser(t testing.TB, exe string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	b := &browser{ctx: ctx}
	// The first Run starts the browser and lives as long as ctx: no timeout on it.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")), "start %s", exe)
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			// The first load asks the API without the token: its 401s are how the page learns it needs one.
			expected := strings.Contains(m.Text, "status of 401")
			if (m.Type == chromedp.ConsoleError || m.IsException()) && !expected {
				b.mu.Lock()
				b.problems = append(b.problems, m.String()+" ("+m.URL+")")
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// do runs the steps, each wait bounded so a page that never shows something fails instead of hanging.
func (b *browser) do(t testing.TB, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, steps...), what)
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t testing.TB, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

// until waits for a JavaScript condition to hold in the page.
func until(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(0))
}

func row(device string) string {
	return fmt.Sprintf(`[...document.querySelectorAll("#devices tbody tr")].find(r => r.dataset.device === %q)`, device)
}

// TestStatusPage: with interrupted devices in the fleet, an operator opens the page, enters the token,
// finds them listed, acknowledges one with the button and sees it acked, silences another, ends the
// silence and deletes the device, and sees a new interruption arrive without reloading.
func TestStatusPage(t *testing.T) {
	exe := chromium(t)
	f := startFleet(t, 8, `
types:
  default: {timeout: 1s, repeat_every: 0s}
`, nil)
	f.signal(t, "dev-1", "dev-2", hostile)
	// A registered device with a label, expected to signal within its 1s: it never does.
	status, body, _ := f.call(t, http.MethodPut, "/v1/devices/dev-berlin", `{"labels": {"site": "berlin"}}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	f.awaitInterrupted(t, 4)

	b := newBrowser(t, exe)
	b.do(t, "the page asks for the token", chromedp.Navigate(f.hb.HTTP+"/"), chromedp.WaitVisible(chromedp.ID("token-input")))
	b.do(t, "enter the token", chromedp.SendKeys(chromedp.ID("token-input"), token), chromedp.Click(chromedp.ID("token-save")))

	b.do(t, "the interrupted devices are listed", until(row("dev-1")), until(row("dev-2")), until(row(hostile)),
		until(`document.getElementById("count-interrupted").textContent === "4"`))
	require.True(t, eval[bool](t, b, row(hostile)+`.querySelector("th").textContent === `+fmt.Sprintf("%q", hostile)),
		"a device id is shown as text")
	require.True(t, eval[bool](t, b, `document.querySelector("#devices img") === null`), "never as HTML")

	b.do(t, "acknowledge dev-2 through its drawer",
		until(row("dev-2")+`.querySelector("button").click() === undefined`),
		chromedp.WaitVisible(chromedp.ID("act-ack")), chromedp.Click(chromedp.ID("act-ack")),
		chromedp.WaitVisible(chromedp.ID("act-note")), chromedp.SendKeys(chromedp.ID("act-note"), "on it"),
		chromedp.Click(chromedp.ID("act-submit")),
		until(row("dev-2")+`?.querySelector(".status").textContent.includes("acked")`))
	var dev2 struct{ Acked bool }
	f.get(t, "/v1/devices/dev-2", &dev2)
	require.True(t, dev2.Acked, "the ack reached the API")
	require.False(t, eval[bool](t, b, row("dev-1")+`.querySelector(".status").textContent.includes("acked")`), "only dev-2")
	b.do(t, "close the drawer", chromedp.Click(chromedp.CSS(`#drawer [data-close]`)), chromedp.WaitNotVisible(chromedp.ID("drawer")))

	b.do(t, "silence dev-1 for the default 2h",
		until(row("dev-1")+`.querySelector("button").click() === undefined`),
		chromedp.WaitVisible(chromedp.ID("act-silence-device")), chromedp.Click(chromedp.ID("act-silence-device")),
		chromedp.WaitVisible(chromedp.ID("act-submit")), chromedp.Click(chromedp.ID("act-submit")),
		until(row("dev-1")+`?.querySelector(".status").textContent.includes("silenced")`))
	b.do(t, "end the silence from the silences table",
		until(`[...document.querySelectorAll("#silences tbody tr")].find(r => r.textContent.includes("device dev-1"))?.querySelector(".end-silence").click() === undefined`),
		until(`!`+row("dev-1")+`?.querySelector(".status").textContent.includes("silenced")`))
	var silences struct{ Silences []struct{ Ends time.Time } }
	f.get(t, "/v1/silences", &silences)
	for _, s := range silences.Silences {
		require.False(t, s.Ends.After(time.Now()), "the silence was ended: %+v", silences)
	}
	b.do(t, "delete dev-1", chromedp.WaitVisible(chromedp.ID("act-delete")), chromedp.Click(chromedp.ID("act-delete")),
		chromedp.WaitVisible(chromedp.ID("act-submit")), chromedp.Click(chromedp.ID("act-submit")),
		until(`!`+row("dev-1")), chromedp.WaitNotVisible(chromedp.ID("drawer")),
		until(`document.getElementById("count-interrupted").textContent === "3"`))
	require.Equal(t, http.StatusNotFound, f.status(t, "/v1/devices/dev-1"), "dev-1 was deleted")

	b.do(t, "the live stream is connected", until(`document.getElementById("live").classList.contains("on")`))
	f.signal(t, "dev-live")
	b.do(t, "a new interruption arrives live", until(row("dev-live")),
		until(`document.getElementById("count-interrupted").textContent === "4"`),
		until(`[...document.querySelectorAll("#activity li")].some(li => li.textContent.includes("dev-live"))`))
	tok := f.device.Publish("devices/dev-fail/heartbeat", 1, false, `{"status":"fail","reason":"valve stuck"}`)
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	b.do(t, "a reported failure arrives live and says why", until(row("dev-fail")),
		until(row("dev-fail")+`?.querySelector(".status").textContent.includes("reported failure: valve stuck")`))
	b.do(t, "its drawer, read from the API, says why too",
		until(row("dev-fail")+`.querySelector("button").click() === undefined`),
		until(`document.getElementById("drawer-fields").textContent.includes("reported failure: valve stuck")`),
		chromedp.Click(chromedp.CSS(`#drawer [data-close]`)), chromedp.WaitNotVisible(chromedp.ID("drawer")))

	b.do(t, "filter by a registered label", chromedp.SendKeys(chromedp.CSS(`#filters input[name=label]`), "site=berlin"),
		chromedp.Click(chromedp.CSS(`#filters button[type=submit]`)),
		until(row("dev-berlin")+` && document.querySelectorAll("#devices tbody tr[data-device]").length === 1`))

	require.Equal(t, token, eval[string](t, b, `sessionStorage.getItem("heartbeatd.token")`))
	require.False(t, eval[bool](t, b, fmt.Sprintf(`location.href.includes(%q) || document.documentElement.outerHTML.includes(%q)`,
		token, token)), "the token is in no URL and no markup")
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Empty(t, b.problems, "console errors (a CSP violation is one)")
}

// TestStatusPageOutageGrows: 50 devices of one type fall silent together and open a correlated outage;
// 30 more fall silent after it started and join it. The page shows the outage with all 80 as its devices,
// the number its end rule counts, without a reload.
func TestStatusPageOutageGrows(t *testing.T) {
	exe := chromium(t)
	f := startFleet(t, 8, `
types:
  default: {timeout: 1s, repeat_every: 0s}
correlation: {by: [device_type], min_devices: 50, window: 10s}
`, nil)
	outageRow := func(devices, silent int) string {
		return fmt.Sprintf(`[...document.querySelectorAll("#outages tbody tr")].some(r => r.cells.length === 5 && `+
			`r.cells[0].textContent === "device_type = default" && r.cells[1].textContent === "%d" && r.cells[2].textContent === "%d")`,
			devices, silent)
	}
	f.signal(t, testenv.DeviceIDs("first", 50)...)

	b := newBrowser(t, exe)
	b.do(t, "open the page with the token", chromedp.Navigate(f.hb.HTTP+"/"), chromedp.WaitVisible(chromedp.ID("token-input")),
		chromedp.SendKeys(chromedp.ID("token-input"), token), chromedp.Click(chromedp.ID("token-save")))
	b.do(t, "the outage of the first 50 is shown", chromedp.WaitVisible(chromedp.ID("outages")), until(outageRow(50, 50)))

	f.signal(t, testenv.DeviceIDs("later", 30)...)
	b.do(t, "the 30 that joined it count among its devices", until(outageRow(80, 80)))
	var answer struct {
		Outages []struct{ Count, Members int }
	}
	f.get(t, "/v1/outages", &answer)
	require.Len(t, answer.Outages, 1)
	require.Equal(t, 50, answer.Outages[0].Count, "the count at its start")
	require.Equal(t, 80, answer.Outages[0].Members)
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Empty(t, b.problems, "console errors (a CSP violation is one)")
}
