package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/daemon"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// The http scenario measures signals posted to the API (POST /v1/signals, NDJSON batches of 1000, each
// answered once Redis stored it) against the Kafka ingest of the same devices in the same run, in
// alternating rounds; the ratio uses the means.

const (
	httpBatch   = 1000
	httpClients = 4
	benchToken  = "hbbench"
)

func init() { register("http", httpScenario) }

func httpScenario(e *env) error {
	store, err := newStore(e, config.DefaultSlots, nil)
	if err != nil {
		return err
	}
	ids := ingestDevices(e.opts.Signals)
	// Every device exists before the first measured run, so none of them pays for creating the devices.
	refresh, err := plainRefreshRate(e.ctx, store, ids)
	if err != nil {
		return err
	}
	// Alternating rounds, Kafka first and last: a shared machine's speed drifts within a run.
	var kafka, posted []float64
	for round := range httpRounds + 1 {
		_, rate, err := kafkaDrain(e.ctx, store, ids)
		if err != nil {
			return err
		}
		kafka = append(kafka, rate)
		if round == httpRounds {
			break
		}
		if rate, err = httpRate(e.ctx, store, ids); err != nil {
			return err
		}
		posted = append(posted, rate)
	}
	k, h := mean(kafka), mean(posted)
	e.add("http", "deadline.Refresh 256/call", refresh, "signals/s", "same run, the devices created")
	e.add("http", "kafka → redis (from 1st write)", k, "signals/s",
		fmt.Sprintf("baseline, same run: mean of %s, alternating with the http rounds; kfake 4 partitions", rates(kafka)))
	e.add("http", "http → redis", h, "signals/s", fmt.Sprintf("%.2fx kafka, %.2fx refresh; mean of %s; %d signals a round, NDJSON %d a request, %d clients",
		h/k, h/refresh, rates(posted), len(ids), httpBatch, httpClients))
	return nil
}

// httpRounds is how many HTTP runs alternate with the Kafka runs (one more of those).
const httpRounds = 2

func mean(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func rates(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ", ")
}

// httpRate serves the API with an ingest chain over store and posts a signal of each device in NDJSON
// batches from httpClients clients: signals/s from the first request to the last answer, each answer
// coming once Redis stored its batch.
func httpRate(ctx context.Context, store *deadline.Store, ids []string) (float64, error) {
	cnt := newCounting(store, len(ids))
	chain, stopChain, err := runChain(cnt)
	if err != nil {
		return 0, err
	}
	defer stopChain()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	srv := &http.Server{Handler: daemon.NewAPI(daemon.APIOptions{Store: store, Signals: chain, Token: benchToken,
		Gatherer: prometheus.NewRegistry(), Timeout: benchTimeout}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	bodies := make(chan []byte, len(ids)/httpBatch+1)
	ts := time.Now().UnixMilli() // gateways: 30 s timeout, far from late in this run
	for i := 0; i < len(ids); i += httpBatch {
		var b bytes.Buffer
		for _, id := range ids[i:min(i+httpBatch, len(ids))] {
			fmt.Fprintf(&b, `{"device_id":%q,"type":"gateway","ts":%d}`+"\n", id, ts)
		}
		bodies <- b.Bytes()
	}
	close(bodies)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: httpClients}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	url := "http://" + ln.Addr().String() + "/v1/signals"
	var wg sync.WaitGroup
	errs := make(chan error, httpClients)
	start := time.Now()
	for range httpClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for body := range bodies {
				if err := postBatch(ctx, client, url, body); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return 0, err
	}
	if got := cnt.n.Load(); got < int64(len(ids)) {
		return 0, fmt.Errorf("hbbench: http: %d of %d signals written when every request was answered", got, len(ids))
	}
	return float64(len(ids)) / elapsed.Seconds(), nil
}

func postBatch(ctx context.Context, client *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+benchToken)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("hbbench: http: %w", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(answer, []byte(`"bad":[]`)) {
		return fmt.Errorf("hbbench: http: %s: %s", resp.Status, answer)
	}
	return nil
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}
