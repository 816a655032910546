package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A refusal carries the server's message and status; a body that is not the API's JSON error is shown
// as it came (a proxy's page), so the operator sees what answered.
func TestErrorsCarryTheServersMessage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/devices/x":
			require.Equal(t, "Bearer tok", r.Header.Get("Authorization"))
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error":"needs the operate role"}`))
		default:
			http.Error(w, "bad gateway from the proxy", http.StatusBadGateway)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL+"/", "tok")
	require.NoError(t, err)
	_, err = c.Device(context.Background(), "x")
	require.EqualError(t, err, "needs the operate role (HTTP 403 Forbidden)")
	assert.True(t, IsStatus(err, http.StatusForbidden))
	_, err = c.Silences(context.Background())
	require.EqualError(t, err, "bad gateway from the proxy (HTTP 502 Bad Gateway)")
}

func TestNewWantsABaseURL(t *testing.T) {
	for _, bad := range []string{"", "127.0.0.1:8080", "ftp://h", "http://"} {
		_, err := New(bad, "")
		assert.Error(t, err, bad)
	}
	_, err := New("https://hb.example:8443", "")
	assert.NoError(t, err)
}
