package statuspage

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestStatusPageAvailability: a device that was interrupted and recovered shows its downtime on today's
// day of its 30-day bar, and its type in the groups' availability; one still down counts there too.
func TestStatusPageAvailability(t *testing.T) {
	exe := chromium(t)
	f := startFleet(t, 8, `
types:
  default: {timeout: 1s, repeat_every: 0s}
`, nil)
	f.signal(t, "dev-back", "dev-down")
	f.awaitInterrupted(t, 2)
	f.signal(t, "dev-back")
	f.awaitInterrupted(t, 1)
	var incidents struct {
		Incidents []struct {
			Closed *time.Time
			DownMs int64 `json:"down_ms"`
		}
	}
	// The history records about 2 s behind the events: by then dev-back (1 s timeout) may have fallen
	// silent again, so its first incident is the closed one among them.
	var closed int64
	require.Eventually(t, func() bool {
		f.get(t, "/v1/devices/dev-back/incidents", &incidents)
		for _, in := range incidents.Incidents {
			if in.Closed != nil {
				closed = in.DownMs
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "dev-back's incident is recorded closed")

	b := newBrowser(t, exe)
	b.do(t, "open the page with the token", chromedp.Navigate(f.hb.HTTP+"/"), chromedp.WaitVisible(chromedp.ID("token-input")),
		chromedp.SendKeys(chromedp.ID("token-input"), token), chromedp.Click(chromedp.ID("token-save")))
	b.do(t, "the groups' availability lists the type with both devices",
		chromedp.WaitVisible(chromedp.ID("availability")),
		until(`[...document.querySelectorAll("#availability tbody tr")].some(r => r.dataset.group === "default" && r.cells[1].textContent === "2")`))

	b.do(t, "dev-back's drawer shows today's downtime on its 30-day bar",
		until(`(document.querySelector("#search input[name=id]").value = "dev-back") && document.querySelector("#search button").click() === undefined`),
		chromedp.WaitVisible(chromedp.ID("drawer")),
		until(`document.querySelectorAll("#drawer-days span").length === 30`))
	down := int64(eval[float64](t, b, `Number(document.querySelector("#drawer-days span:last-child").dataset.downMs)`))
	// dev-back signalled once more only: it has fallen silent again since, and that incident grows.
	f.get(t, "/v1/devices/dev-back/incidents", &incidents)
	var total int64
	for _, in := range incidents.Incidents {
		total += in.DownMs
	}
	require.GreaterOrEqual(t, down, closed, "today's bar holds the recovered incident's downtime")
	require.LessOrEqual(t, down, total, "and no more than its incidents' downtime so far")
	require.Equal(t, 0, eval[int](t, b, `[...document.querySelectorAll("#drawer-days span")].slice(0, 29).filter(s => s.dataset.downMs !== "0").length`),
		"no downtime on the days before")
	require.True(t, eval[bool](t, b, `/\d incident\(s\) in 30 days/.test(document.getElementById("drawer-availability").textContent)`))
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Empty(t, b.problems, "console errors (a CSP violation is one)")
}
