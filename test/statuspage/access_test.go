package statuspage

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestStatusPageShowsOnlyWhatTheTokenMay: a read-only viewer sees the interrupted devices and the
// silences but no button to ack, silence, end a silence or delete; the admin token in the same page
// gets them back; a token scoped to one site sees that site's devices, live, without the fleet's counts.
func TestStatusPageShowsOnlyWhatTheTokenMay(t *testing.T) {
	exe := chromium(t)
	const viewer, berlin = "page-viewer-token", "page-berlin-token"
	sum, berlinSum := sha256.Sum256([]byte(viewer)), sha256.Sum256([]byte(berlin))
	f := startFleet(t, 4, `
types:
  default: {timeout: 1s, repeat_every: 0s}
`, nil, "HEARTBEATD_HTTP_TOKENS=[{name: viewer, role: read, token_sha256: "+hex.EncodeToString(sum[:])+"}, "+
		"{name: berlin, role: read, token_sha256: "+hex.EncodeToString(berlinSum[:])+", scope: labels.site=berlin}]")
	for dev, site := range map[string]string{"dev-1": "berlin", "dev-2": "paris"} {
		status, body, _ := f.call(t, http.MethodPut, "/v1/devices/"+dev, `{"labels":{"site":"`+site+`"}}`)
		require.Equal(t, http.StatusOK, status, "%s", body)
	}
	f.signal(t, "dev-1", "dev-2")
	f.awaitInterrupted(t, 2)
	status, body, _ := f.call(t, http.MethodPost, "/v1/silences", `{"device_type":"other","for":"1h"}`)
	require.Equal(t, http.StatusCreated, status, "%s", body)

	b := newBrowser(t, exe)
	b.do(t, "enter the viewer's token", chromedp.Navigate(f.hb.HTTP+"/"), chromedp.WaitVisible(chromedp.ID("token-input")),
		chromedp.SendKeys(chromedp.ID("token-input"), viewer), chromedp.Click(chromedp.ID("token-save")))
	b.do(t, "the viewer sees the device, the silence and who it is", until(row("dev-1")),
		until(`document.getElementById("token-open").textContent === "API token: viewer (read)"`),
		until(`[...document.querySelectorAll("#silences tbody tr")].some(r => r.textContent.includes("type other"))`),
		until(row("dev-1")+`.querySelector("button").click() === undefined`),
		chromedp.WaitVisible(chromedp.ID("drawer")))
	require.True(t, eval[bool](t, b, `document.querySelectorAll("#drawer-actions button").length === 0`), "no act in the drawer")
	require.True(t, eval[bool](t, b, `document.querySelectorAll(".end-silence").length === 0`), "no End on the silences")
	require.True(t, eval[bool](t, b, `document.getElementById("silence-type").hidden`), "no type silence form")
	b.do(t, "close the drawer", chromedp.Click(chromedp.CSS(`#drawer [data-close]`)), chromedp.WaitNotVisible(chromedp.ID("drawer")))

	b.do(t, "switch to the admin token", chromedp.Click(chromedp.ID("token-open")), chromedp.WaitVisible(chromedp.ID("token-input")),
		chromedp.SendKeys(chromedp.ID("token-input"), token), chromedp.Click(chromedp.ID("token-save")),
		until(`document.getElementById("token-open").textContent === "API token: http.token (admin)"`),
		until(row("dev-1")+`.querySelector("button").click() === undefined`),
		chromedp.WaitVisible(chromedp.ID("act-ack")), chromedp.WaitVisible(chromedp.ID("act-delete")))
	require.False(t, eval[bool](t, b, `document.getElementById("silence-type").hidden`), "the admin may silence a type")

	b.do(t, "close the drawer again", chromedp.Click(chromedp.CSS(`#drawer [data-close]`)), chromedp.WaitNotVisible(chromedp.ID("drawer")))
	b.do(t, "switch to the berlin token", chromedp.Click(chromedp.ID("token-open")), chromedp.WaitVisible(chromedp.ID("token-input")),
		chromedp.SendKeys(chromedp.ID("token-input"), berlin), chromedp.Click(chromedp.ID("token-save")),
		until(`document.getElementById("token-open").textContent === "API token: berlin (read, labels.site=berlin)"`))
	// The list the admin saw is replaced by berlin's: paris, outside its scope, goes; berlin's device stays.
	b.do(t, "berlin's devices only", until(row("dev-2")+` === undefined`), until(row("dev-1")))
	b.do(t, "berlin's live events", until(`document.getElementById("live").classList.contains("on")`))
	b.do(t, "no fleet counts", until(`document.getElementById("count-interrupted").textContent === "–"`))
	require.True(t, eval[bool](t, b, row("dev-1")+` !== undefined && `+row("dev-2")+` === undefined`))
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Empty(t, b.problems, "console errors (a CSP violation is one)")
}
