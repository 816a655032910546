package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// BenchmarkImport posts HB_BENCH_IMPORT_ROWS (default 200k) NDJSON rows of type default, as a large
// fleet's import sends them, to POST /v1/devices:import on a real Redis over 64 slots; rows/s is the
// whole request's rate, each iteration on an empty Redis. On a shared host the rate follows the host's
// load; redis-µs/row (the server's used_cpu_user+sys) and go-µs/row (this process's CPU: the handler,
// the client, and the test's own HTTP client) say what a row costs whatever the load.
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
		cpu0, self0 := testenv.ServerCPU(b, rdb), processCPU()
		b.StartTimer()
		began := time.Now()
		resp, err := http.Post(srv.URL+importPath, "application/x-ndjson", strings.NewReader(body.String()))
		require.NoError(b, err)
		require.Equal(b, http.StatusOK, resp.StatusCode)
		_ = resp.Body.Close()
		b.ReportMetric(float64(rows)/time.Since(began).Seconds(), "rows/s")
		b.StopTimer()
		b.ReportMetric(float64((testenv.ServerCPU(b, rdb)-cpu0).Microseconds())/float64(rows), "redis-µs/row")
		b.ReportMetric(float64((processCPU()-self0).Microseconds())/float64(rows), "go-µs/row")
		srv.Close()
		b.StartTimer()
	}
}

// processCPU is this process's user + system CPU so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
