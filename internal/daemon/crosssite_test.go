package daemon

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoTokenRefusesCrossSiteRequests: without a token, a request naming another host (a rebound DNS
// name) or coming from another site's page is refused; the status page's own requests and tools such as
// curl (no Origin, no Sec-Fetch-Site) are served. With a token the token decides.
func TestNoTokenRefusesCrossSiteRequests(t *testing.T) {
	f := newAPIFixture(t, "")
	call := func(host string, headers map[string]string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/stats", nil)
		require.NoError(t, err)
		if host != "" {
			req.Host = host
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, call("", nil), "curl on loopback")
	require.Equal(t, http.StatusOK, call("localhost:8080", nil))
	require.Equal(t, http.StatusOK, call("", map[string]string{"Sec-Fetch-Site": "same-origin"}), "the status page")
	require.Equal(t, http.StatusForbidden, call("evil.example:8080", nil), "a rebound DNS name")
	require.Equal(t, http.StatusForbidden, call("", map[string]string{"Sec-Fetch-Site": "cross-site"}))
	require.Equal(t, http.StatusForbidden, call("", map[string]string{"Origin": "https://evil.example"}))

	withToken := newAPIFixture(t, "s3cret")
	req, err := newRequest(http.MethodGet, withToken.srv.URL+"/v1/stats", "s3cret", nil)
	require.NoError(t, err)
	req.Host = "heartbeatd.internal:8080"
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "with a token, any host")
}
