package alarm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
)

// devices{state,type} counts the owned slots' devices, shows configured types without devices as 0,
// follows a change of the owned slots, and drops the series of a type no longer configured.
func TestRunCountsDevicesByType(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	store := deadlinetest.NewStore(t, rdb, deadline.Options{Slots: 4, Timeout: func(string) time.Duration { return time.Hour }},
		"default", "gateway", "sensor")
	ctx, cancel := context.WithCancel(context.Background())
	var sigs []deadline.Signal
	perSlot := map[int]int64{}
	for i := range 20 {
		id := fmt.Sprint("gw-", i)
		sigs = append(sigs, deadline.Signal{Device: id, Type: "gateway", Seen: time.Now()})
		perSlot[deadline.Slot(id, 4)]++
	}
	require.NoError(t, store.Refresh(ctx, sigs))

	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	var slots atomic.Pointer[[]int]
	var names atomic.Pointer[[]string]
	own := func(s ...int) { slots.Store(&s) }
	configure := func(n ...string) { names.Store(&n) }
	own(0, 1)
	configure("default", "gateway", "sensor")
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = m.RunCounts(ctx, CountsOptions{Store: store, Slots: func() []int { return *slots.Load() },
			Types: func() []string { return *names.Load() }, Every: 10 * time.Millisecond, Logger: zaptest.NewLogger(t)})
	})
	t.Cleanup(func() { cancel(); wg.Wait() })

	devices := func() map[string]float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "heartbeatd_devices" {
				continue
			}
			for _, s := range mf.GetMetric() {
				l := map[string]string{}
				for _, p := range s.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				out[l["state"]+"/"+l["type"]] = s.GetGauge().GetValue()
			}
		}
		return out
	}
	expect := func(want map[string]float64) {
		t.Helper()
		require.Eventually(t, func() bool { return fmt.Sprint(devices()) == fmt.Sprint(want) }, 10*time.Second, 5*time.Millisecond,
			"want %v", want)
	}
	zeros := func(gateways float64, typeNames ...string) map[string]float64 {
		out := map[string]float64{}
		for _, n := range typeNames {
			out["online/"+n], out["interrupted/"+n] = 0, 0
		}
		out["online/gateway"] = gateways
		return out
	}
	expect(zeros(float64(perSlot[0]+perSlot[1]), "default", "gateway", "sensor"))
	own(2, 3) // a handover: the new slots are counted
	expect(zeros(float64(perSlot[2]+perSlot[3]), "default", "gateway", "sensor"))
	configure("default", "gateway") // sensor removed by a reload
	expect(zeros(float64(perSlot[2]+perSlot[3]), "default", "gateway"))
}
