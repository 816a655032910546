package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

// BenchmarkImport posts HB_BENCH_IMPORT_ROWS (default 200k) NDJSON rows of type default, as a large
// fleet's import sends them, to POST /v1/devices:import on a real Redis over 64 slots; rows/s is the
// whole request's rate, each iteration on an empty Redis.
func BenchmarkImport(b *testing.B) {
	rows := benchrig.SizeFromEnv("HB_BENCH_IMPORT_ROWS", 200_000)
	rdb := testenv.StartRedis(b).Client(b)
	timeout := func(string) time.Duration { return 2 * time.Hour }
	var body strings.Builder
	for i := range rows {
		fmt.Fprintf(&body, `{"device_id":"meter-%08d","device_type":"default"}`+"\n", i)
	}
	for b.Loop() {
		b.StopTimer()
		require.NoError(b, rdb.FlushAll(context.Background()).Err())
		store, err := deadline.New(rdb, deadline.Options{Slots: 64, Timeout: timeout})
		require.NoError(b, err)
		require.NoError(b, store.Load(context.Background(), "default"))
		srv := httptest.NewServer(NewAPI(APIOptions{Store: store, Timeout: timeout, MaxBodySize: 1024,
			KnownType: func(n string) bool { return n == "default" }}))
		b.StartTimer()
		began := time.Now()
		resp, err := http.Post(srv.URL+importPath, "application/x-ndjson", strings.NewReader(body.String()))
		require.NoError(b, err)
		require.Equal(b, http.StatusOK, resp.StatusCode)
		_ = resp.Body.Close()
		b.ReportMetric(float64(rows)/time.Since(began).Seconds(), "rows/s")
		b.StopTimer()
		srv.Close()
		b.StartTimer()
	}
}
