package statuspage

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The page stays small and self-contained: no asset from elsewhere, nothing to build.
func TestPageIsSmallAndSelfContained(t *testing.T) {
	require.Less(t, len(page), 100<<10, "the page is meant to stay under 100 KB")
	html := string(page)
	for _, ref := range regexp.MustCompile(`(?i)(?:src|href|action)\s*=\s*["']?([^"'\s>]+)`).FindAllStringSubmatch(html, -1) {
		if !strings.HasPrefix(ref[1], "data:") {
			t.Errorf("the page loads %s: everything must be inline", ref[1])
		}
	}
	require.NotRegexp(t, `(?i)https?://|@import|url\(`, html, "no external address, import or url()")
}

// The page never writes field data as HTML (device ids and notes come from devices and operators), never
// puts the token in a URL, and keeps it in the tab's sessionStorage only.
func TestPageHandlesTheTokenAndDataSafely(t *testing.T) {
	html := string(page)
	for _, unsafe := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
		"EventSource", "localStorage.setItem(TOKEN_KEY"} {
		require.NotContains(t, html, unsafe)
	}
	require.Contains(t, html, "sessionStorage.setItem(TOKEN_KEY")
	require.Contains(t, html, `Authorization = "Bearer " + st.token`)
	require.Regexp(t, `fetch\("v1/events/stream", \{ headers: st\.token \? \{ Authorization: "Bearer " \+ st\.token \}`, html,
		"the live stream sends the token in a header")
}

// The policy allows exactly the page's own style and script: a changed script without a changed hash
// would not run, and the hashes are the ones a browser computes.
func TestContentSecurityPolicyHashesTheInlineCode(t *testing.T) {
	csp := contentSecurityPolicy()
	for _, tag := range []string{"style", "script"} {
		m := regexp.MustCompile(`(?s)<`+tag+`>(.*?)</`+tag+`>`).FindAllSubmatch(page, -1)
		require.Len(t, m, 1, "one <%s>", tag)
		sum := sha256.Sum256(m[0][1])
		require.Contains(t, csp, tag+"-src 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
	}
	require.Contains(t, csp, "default-src 'none'")
	require.Contains(t, csp, "connect-src 'self'")
	require.Contains(t, csp, "frame-ancestors 'none'")
	require.NotContains(t, csp, "unsafe-inline")
	require.Panics(t, func() { inline([]byte("<script>a</script><script>b</script>"), "script") })
}

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Equal(t, contentSecurityPolicy(), resp.Header.Get("Content-Security-Policy"))
	require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	var body bytes.Buffer
	_, err = body.ReadFrom(resp.Body)
	require.NoError(t, err)
	require.Equal(t, page, body.Bytes())

	// A reload revalidates and gets 304 while the binary is the same.
	etag := resp.Header.Get("ETag")
	require.True(t, strings.HasPrefix(etag, `"`), etag)
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("If-None-Match", etag)
	again, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	again.Body.Close()
	require.Equal(t, http.StatusNotModified, again.StatusCode)
}
