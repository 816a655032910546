package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// A replica on a host whose clock is off cannot be made with faketime: libfaketime replaces libc's clock
// calls, and a Go binary reads the clock through the vDSO (or a raw syscall), never libc, cgo or not, so
// `faketime -f +2s heartbeatd` runs on the true time. A time namespace (unshare --time) offsets only the
// monotonic and boot-time clocks, never CLOCK_REALTIME. So the skewed replica is heartbeatd built with
// package time's Now shifted (go build -overlay): its wall clock reads HB_CHAOS_CLOCK_SKEW off while its
// monotonic clock runs true, as on a host whose clock is off. The shift exists only in that test build;
// the product binary has no such switch.

// clockSkewEnv is the variable the skewed build reads its offset from (a Go duration, "+2s", "-7s").
const clockSkewEnv = "HB_CHAOS_CLOCK_SKEW"

// skewSource is added to package time in the skewed build; nowAnchor is the line of time.Now after
// which the shift is applied.
const (
	skewSource = `package time

import "syscall"

// chaosSkew is the wall clock's offset in this test build of heartbeatd (test/chaos).
var chaosSkew = func() int64 {
	v, _ := syscall.Getenv("` + clockSkewEnv + `")
	d, _ := ParseDuration(v)
	return int64(d)
}()

func chaosSkewed(sec int64, nsec int32) (int64, int32) {
	if chaosSkew == 0 {
		return sec, nsec
	}
	ns := sec*1e9 + int64(nsec) + chaosSkew
	return ns / 1e9, int32(ns % 1e9)
}
`
	nowAnchor = "\tsec, nsec, mono := runtimeNow()\n"
)

// skewedBuild is the skewed heartbeatd, built once per test process (the overlay rebuilds the standard
// library: about a minute on two cores without a build cache) and removed by TestMain.
var skewedBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// skewedBinary builds heartbeatd whose wall clock is shifted by clockSkewEnv and returns its path.
func skewedBinary(t *testing.T) string {
	t.Helper()
	b := &skewedBuild
	b.once.Do(func() { b.dir, b.path, b.err = buildSkewed() })
	require.NoError(t, b.err)
	return b.path
}

func buildSkewed() (dir, path string, err error) {
	dir, err = os.MkdirTemp("", "heartbeatd-skewed-")
	if err != nil {
		return "", "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
	if err != nil {
		return dir, "", fmt.Errorf("chaos: go env GOROOT: %w", err)
	}
	timeDir := filepath.Join(strings.TrimSpace(string(out)), "src", "time")
	src, err := os.ReadFile(filepath.Join(timeDir, "time.go"))
	if err != nil {
		return dir, "", fmt.Errorf("chaos: %w", err)
	}
	if strings.Count(string(src), nowAnchor) != 1 {
		return dir, "", fmt.Errorf("chaos: %s: time.Now no longer reads %q; adapt the skewed build", timeDir, nowAnchor)
	}
	patched := strings.Replace(string(src), nowAnchor, nowAnchor+"\tsec, nsec = chaosSkewed(sec, nsec)\n", 1)
	files := map[string]string{"time.go": patched, "zz_chaos_skew.go": skewSource}
	replace := map[string]string{}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			return dir, "", err
		}
		replace[filepath.Join(timeDir, name)] = p
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return dir, "", err
	}
	overlayPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayPath, overlay, 0o600); err != nil {
		return dir, "", err
	}
	path = filepath.Join(dir, "heartbeatd")
	build := exec.CommandContext(ctx, "go", "build", "-overlay", overlayPath, "-o", path, "github.com/heartbeatd/heartbeatd/cmd/heartbeatd")
	if out, err := build.CombinedOutput(); err != nil {
		return dir, "", fmt.Errorf("chaos: build the skewed heartbeatd: %w\n%s", err, out)
	}
	return dir, path, nil
}

// removeSkewedBuild deletes what skewedBinary built, if it built anything.
func removeSkewedBuild() {
	if dir := skewedBuild.dir; dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// TestChaosClockSkew runs two replicas on one Redis, MQTT broker and Kafka, the second on a clock 2s
// ahead ("ahead") or 7s behind ("behind") Redis TIME, both reading the devices' topic as one MQTT shared
// subscription, so the skewed replica stores half the signals. The skewed replica must measure its
// offset, claim nothing (its slots go to the other) and report not ready naming the offset; the other
// must report every silent device on time: none early (an interruption raised or read before its
// deadline, or a last_seen before the signal was sent: a deadline counted from a clock behind), none of
// the keepers, no event degraded, and no hold-back anywhere (a skewed clock is no blind window).
func TestChaosClockSkew(t *testing.T) {
	bin := skewedBinary(t)
	t.Run("ahead", func(t *testing.T) { clockSkew(t, bin, "ahead", 2*time.Second) })
	t.Run("behind", func(t *testing.T) { clockSkew(t, bin, "behind", -7*time.Second) })
}

// offsetPattern finds the offset /readyz names in the clock check.
var offsetPattern = regexp.MustCompile(`clock offset ([+-]\S+) from Redis TIME`)

// clockSkew is one case of TestChaosClockSkew: the skewed replica's clock reads skew off.
func clockSkew(t *testing.T, bin, name string, skew time.Duration) {
	n := fleetSize(t)
	f := startFleet(t)
	const group = "chaos"
	a := f.startDaemon(daemonOptions{replica: "replica-a", sharedGroup: group})
	skewed := f.launchDaemon(daemonOptions{replica: "replica-skewed", sharedGroup: group},
		testenv.HeartbeatdOptions{Binary: bin, Env: []string{clockSkewEnv + "=" + skew.String()}})
	logs := func() string { return "replica-a:\n" + a.LogTail() + "\nreplica-skewed:\n" + skewed.LogTail() }

	// The skewed replica is subscribed (it gets its share of the signals) and not ready for its clock only.
	var clock string
	require.True(t, poll(30*time.Second, func() bool {
		code, checks, err := readyz(skewed)
		clock, _ = checks["clock"].(string)
		return err == nil && code == http.StatusServiceUnavailable && checks["mqtt"] == "ok" && checks["redis"] == "ok" &&
			offsetPattern.MatchString(clock)
	}), "skewed replica: /readyz does not name its clock offset (clock check %q)\n%s", clock, logs())
	offset, err := time.ParseDuration(offsetPattern.FindStringSubmatch(clock)[1])
	require.NoError(t, err, clock)
	require.InDelta(t, float64(-skew), float64(offset), float64(config.DefaultMaxClockOffset), "measured offset: %s", clock)
	t.Logf("skewed replica's /readyz clock check: %s", clock)
	// Its slots are the other replica's, and the hold-back of its start (its MQTT share was not read
	// until it subscribed) is over: from here on, nothing may hold detection back.
	all := awaitStats(t, a, 30*time.Second, "replica-a scans every slot, without hold-back", func(st stats) bool {
		return len(st.OwnedSlots) == st.Slots && !st.HoldBack.Active
	})
	awaitStats(t, skewed, 30*time.Second, "the skewed replica scans nothing", func(st stats) bool { return len(st.OwnedSlots) == 0 })
	settled := map[*testenv.Heartbeatd]int{a: len(a.Log()), skewed: len(skewed.Log())}

	s := &scenario{fleet: f, n: n, hb: a, p: f.publisher("devices"), silent: ids("silent", n)}
	s.keepers(10)
	sent := time.Now().Truncate(time.Millisecond) // last_seen is on the millisecond
	require.NoError(t, s.p.signal(s.silent, nil))
	r := s.events.tallyInterrupted("clock_skew_"+name, n, s.settle("skew-"+name, 30*time.Second))
	for _, id := range s.silent {
		e, ok := s.events.firstOf(event.Interrupted, id)
		switch {
		case !ok:
		case e.LastSeen.Before(sent):
			r.falses++
			r.detail = append(r.detail, fmt.Sprintf("early %s: last_seen %s before the signal was sent at %s", e.ID,
				e.LastSeen.Format(time.RFC3339Nano), sent.Format(time.RFC3339Nano)))
		case e.Degraded:
			r.falses++
			r.detail = append(r.detail, "degraded "+e.ID)
		}
	}
	// A skewed clock must open no blind window. Redis refusing or not answering deadline writes (a host
	// too loaded for its write timeout) rightly opens one, and the ingest lag of the signals waiting
	// meanwhile another: then a hold-back says nothing of the clock, and only the events are judged.
	var writeTrouble bool
	for _, hb := range []*testenv.Heartbeatd{a, skewed} {
		writeTrouble = writeTrouble || strings.Contains(hb.Log()[settled[hb]:], "redis refused deadline writes")
	}
	for replica, hb := range map[string]*testenv.Heartbeatd{"replica-a": a, "replica-skewed": skewed} {
		switch {
		case !strings.Contains(hb.Log()[settled[hb]:], "detection held back"):
		case writeTrouble:
			t.Logf("%s held detection back after Redis refused deadline writes: not counted against the clock", replica)
		default:
			r.falses++
			r.detail = append(r.detail, replica+" held detection back")
		}
	}
	report(t, r, logs)
	// Still so at the end: the skewed replica scanned nothing all along.
	st, err := getStats(skewed)
	require.NoError(t, err)
	require.Empty(t, st.OwnedSlots, "the skewed replica took slots")
	require.Len(t, all.OwnedSlots, all.Slots)
	require.Contains(t, skewed.Log(), "clock too far from Redis TIME")
}
