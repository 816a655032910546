package statuspage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// benchTypes are the seeded fleet's types: timeouts long enough that no online device expires while
// the benchmark runs.
var benchTypes = []string{"default", "gateway", "sensor", "tracker"}

const benchTypesYAML = `
types:
  default: {timeout: 1h, repeat_every: 0s}
  gateway: {timeout: 1h}
  sensor: {timeout: 1h}
  tracker: {timeout: 1h}
`

// BenchmarkStatusPageLoad loads the status page against a fleet of HB_PAGE_DEVICES devices (default 10k,
// so `make test` stays quick; docs/benchmarks.md has the figure for 1M), 0.1% of them interrupted, on
// the real binary, and reports: page-ms, from navigation to the counts and the first page of interrupted
// devices shown; stats-ms, list-ms and by-type-ms, the API calls behind it (by-type cold: the scan its
// cache then spares the next 5 s of callers).
func BenchmarkStatusPageLoad(b *testing.B) {
	devices := 10000
	if v := os.Getenv("HB_PAGE_DEVICES"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err, "HB_PAGE_DEVICES")
		devices = n
	}
	interrupted := max(devices/1000, 10)
	exe := chromium(b)
	f := startFleet(b, 64, benchTypesYAML, func(addr string) { seedFleet(b, addr, devices, interrupted) })
	f.awaitInterrupted(b, int64(interrupted))

	var stats, list, byType map[string]any
	byTypeTook := f.get(b, "/v1/stats?by_type=true", &byType)
	statsTook := f.get(b, "/v1/stats", &stats)
	listTook := f.get(b, "/v1/devices?state=interrupted&limit=50", &list)
	online := stats["devices"].(map[string]any)["online"].(float64)
	require.EqualValues(b, devices-interrupted, online, "the seeded fleet is online")

	br := newBrowser(b, exe)
	br.do(b, "set the token for the page's origin", chromedp.Navigate(f.hb.HTTP+"/"), chromedp.WaitVisible(chromedp.ID("token-input")),
		chromedp.SendKeys(chromedp.ID("token-input"), token), chromedp.Click(chromedp.ID("token-save")),
		until(`document.documentElement.dataset.loadedMs`))
	var pageMs float64
	b.ResetTimer()
	for b.Loop() {
		br.do(b, "load the page", chromedp.Navigate(f.hb.HTTP+"/"), until(`document.documentElement.dataset.loadedMs`))
		pageMs += eval[float64](b, br, `Number(document.documentElement.dataset.loadedMs)`)
		require.Equal(b, fmt.Sprint(interrupted), eval[string](b, br, `document.getElementById("count-interrupted").textContent.replaceAll(/\D/g, "")`))
		require.GreaterOrEqual(b, eval[int](b, br, `document.querySelectorAll("#devices tbody tr[data-device]").length`), min(interrupted, 50))
	}
	b.StopTimer()
	b.ReportMetric(pageMs/float64(b.N), "page-ms")
	b.ReportMetric(ms(statsTook), "stats-ms")
	b.ReportMetric(ms(listTook), "list-ms")
	b.ReportMetric(ms(byTypeTook), "by-type-ms")
	b.ReportMetric(float64(devices), "devices")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// seedFleet writes devices straight into Redis as heartbeatd's store would: all but interrupted have
// signalled within the last half hour; interrupted signalled two hours ago, so their deadlines passed
// and heartbeatd interrupts them as it starts.
func seedFleet(tb testing.TB, addr string, devices, interrupted int) {
	tb.Helper()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	store, err := deadline.New(rdb, deadline.Options{KeyPrefix: "hb", Slots: 64, Timeout: func(string) time.Duration { return time.Hour }})
	require.NoError(tb, err)
	require.NoError(tb, store.Load(ctx, benchTypes...))
	now := time.Now()
	const batch = 5000
	var g errgroup.Group
	g.SetLimit(4)
	for start := 0; start < devices; start += batch {
		g.Go(func() error {
			signals := make([]deadline.Signal, 0, batch)
			for i := start; i < min(start+batch, devices); i++ {
				seen := now.Add(-time.Duration(rand.Int64N(int64(30 * time.Minute))))
				if i < interrupted {
					seen = now.Add(-2 * time.Hour)
				}
				signals = append(signals, deadline.Signal{Device: fmt.Sprintf("dev-%07d", i), Type: benchTypes[i%len(benchTypes)], Seen: seen})
			}
			return store.Refresh(ctx, signals)
		})
	}
	require.NoError(tb, g.Wait())
}
