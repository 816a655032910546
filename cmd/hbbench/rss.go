package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/config"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

// rssScenario runs the real heartbeatd binary as a subprocess against hbbench's redis-server and a kfake
// broker, feeds -devices devices through its Kafka ingest and reads VmRSS/VmHWM from /proc/pid/status:
// idle (healthy, nothing ingested) and once Redis holds every device. Device state lives in Redis, so
// heartbeatd's own memory should not grow with the fleet; this scenario checks that it does not.
func rssScenario(e *env) (err error) {
	n := e.opts.Devices
	bin, err := heartbeatdBinary(e)
	if err != nil {
		return err
	}
	k, err := startKafka(4, signalTopic, eventsTopic, "heartbeat.deadletter")
	if err != nil {
		return err
	}
	defer k.stop()
	port, err := freePort()
	if err != nil {
		return err
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	dir, err := os.MkdirTemp("", "hbbench-heartbeatd-")
	if err != nil {
		return err
	}
	cfg := fmt.Sprintf(`
redis: {addrs: [%q], slots: %d}
types:
  default: {timeout: 10m}
  gateway: {timeout: 10m}
ingest:
  mqtt: {enabled: false}
  kafka: {enabled: true, brokers: [%q], topics: [%q], group_id: hbbench-rss}
events:
  kafka: {brokers: [%q]}
http: {listen: %q}
log: {level: warn}
`, e.redis.addr, config.DefaultSlots, strings.Join(k.addrs, ","), signalTopic, strings.Join(k.addrs, ","), listen)
	cfgPath := filepath.Join(dir, "heartbeatd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		os.RemoveAll(dir)
		return err
	}
	hb, err := startChild("heartbeatd", bin, []string{"run", "-config", cfgPath}, os.Environ(), dir)
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\nheartbeatd log:\n%s", err, hb.logTail())
		}
		hb.stop(10 * time.Second)
	}()
	if err := hb.waitReady(e.ctx, 30*time.Second, func() error { return httpOK("http://" + listen + "/readyz") }); err != nil {
		return err
	}
	idle, err := procStatus(hb.pid(), "VmRSS")
	if err != nil {
		return err
	}

	w := &kafka.Writer{Addr: kafka.TCP(k.addrs...), Topic: signalTopic, Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond,
		BatchSize: 5000, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	store, err := deadline.New(e.redis.client, deadline.Options{Slots: config.DefaultSlots, Timeout: benchTimeout})
	if err != nil {
		return err
	}
	msgs := make([]kafka.Message, 0, 10_000)
	start := time.Now()
	for i := range n {
		id := deviceID(i)
		msgs = append(msgs, kafka.Message{Key: []byte(id), Value: fmt.Appendf(nil, signalPayload, time.Now().UnixMilli())})
		if len(msgs) == cap(msgs) || i == n-1 {
			if err := w.WriteMessages(e.ctx, msgs...); err != nil {
				return fmt.Errorf("hbbench: write signals: %w", err)
			}
			msgs = msgs[:0]
		}
	}
	var peak int64
	for {
		st, err := procStatus(hb.pid(), "VmRSS")
		if err != nil {
			return err
		}
		peak = max(peak, st["VmRSS"])
		c, err := store.Count(e.ctx)
		if err != nil {
			return err
		}
		if c.Online >= int64(n) {
			break
		}
		if time.Since(start) > 5*time.Minute {
			return fmt.Errorf("hbbench: heartbeatd stored %d of %d devices after 5 minutes", c.Online, n)
		}
		if err := sleepCtx(e.ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	took := time.Since(start)
	after, err := procStatus(hb.pid(), "VmRSS", "VmHWM")
	if err != nil {
		return err
	}
	note := fmt.Sprintf("real binary (subprocess), %d devices in via Kafka ingest", n)
	e.add("rss", "heartbeatd VmRSS idle", float64(idle["VmRSS"])/1024, "MiB", "healthy, nothing ingested")
	e.add("rss", "heartbeatd VmRSS with devices", float64(after["VmRSS"])/1024, "MiB", note)
	e.add("rss", "heartbeatd VmRSS peak sampled", float64(max(peak, after["VmRSS"]))/1024, "MiB", "every 50ms while ingesting")
	e.add("rss", "heartbeatd VmHWM", float64(after["VmHWM"])/1024, "MiB", "kernel high-water mark")
	e.add("rss", "RSS growth per device", float64(after["VmRSS"]-idle["VmRSS"])*1024/float64(n), "B", "VmRSS with devices − idle")
	e.add("rss", "ingest rate into the binary", float64(n)/took.Seconds(), "signals/s", "write to Kafka → all in Redis")
	return nil
}

func httpOK(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d", url, resp.StatusCode)
	}
	return nil
}

// heartbeatdBinary is -heartbeatd (or HB_HEARTBEATD_BIN), else ./cmd/heartbeatd built once into a
// temporary directory removed at exit.
func heartbeatdBinary(e *env) (string, error) {
	if e.opts.HeartbeatdBin != "" {
		return e.opts.HeartbeatdBin, nil
	}
	if p := os.Getenv("HB_HEARTBEATD_BIN"); p != "" {
		return p, nil
	}
	dir, err := os.MkdirTemp("", "hbbench-bin-")
	if err != nil {
		return "", err
	}
	e.cleanup(func() { os.RemoveAll(dir) })
	path, err := testenv.BuildHeartbeatd(e.ctx, dir)
	if err != nil {
		return "", fmt.Errorf("hbbench: %w (or pass -heartbeatd)", err)
	}
	e.opts.HeartbeatdBin = path
	return path, nil
}
