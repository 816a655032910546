package daemon

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// A reload refused for a bad Alertmanager URL names the key and the URL with its query's values and its
// userinfo redacted, in the /-/reload answer and in the log (issue 58, 5): an api_key in a query is a
// secret as much as a password.
func TestReloadRedactsURLs(t *testing.T) {
	const secret = "am-key-91c4"
	path := filepath.Join(t.TempDir(), "heartbeatd.yaml")
	const good = `
redis: {addrs: ["127.0.0.1:6379"]}
types: {default: {timeout: 60s}}
events: {kafka: {brokers: ["127.0.0.1:9092"]}}
`
	require.NoError(t, os.WriteFile(path, []byte(good), 0o600))
	cfg, err := config.LoadEnv(path, nil)
	require.NoError(t, err)
	core, logs := observer.New(zap.DebugLevel)
	coord := config.NewCoordinator(path, nil, zap.New(core), nil, cfg)
	srv := httptest.NewServer(NewAPI(APIOptions{Reload: coord.Reload, Gatherer: prometheus.NewRegistry()}))
	t.Cleanup(srv.Close)

	for _, c := range []struct{ url, says string }{
		{"https://am.example:9093/?api_key=" + secret, `"https://am.example:9093/?api_key=redacted": a base URL has no query`},
		{"https://admin:" + secret + "@/", `"https://admin:redacted@/": no host`},
		{"https://am.example:9093/%zz?api_key=" + secret, "is not a URL"},
	} {
		require.NoError(t, os.WriteFile(path, []byte(good+"outputs: {alertmanager: {urls: [\""+c.url+"\"]}}\n"), 0o600))
		code, out := callJSON(t, srv.URL, "POST", "/-/reload", "", "")
		require.Equal(t, http.StatusBadRequest, code, "%v", out)
		assert.Contains(t, out["error"], "outputs.alertmanager.urls[0]")
		assert.Contains(t, out["error"], c.says)
		assert.NotContains(t, out["error"], secret, "the reload's answer shows a secret")
	}
	require.NotZero(t, logs.Len())
	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			assert.NotContains(t, e.Message+" "+k+"="+toString(v), secret, "the log shows a secret")
		}
	}
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if e, ok := v.(error); ok {
		return e.Error()
	}
	return ""
}
