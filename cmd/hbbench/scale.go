package main

// The scale scenario: a fleet of expected devices built through the real binary's import, two replicas
// sharing its slots and its Kafka group, at each of -scale-sizes, printed beside the first size as
// ratios (docs/scaling.md).

import (
	"fmt"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

func init() { register("scale", scaleScenario) }

// scaleRowsPerRequest bounds one import request (≈ 50 B a row, well under the import's 256 MiB).
const scaleRowsPerRequest = 2_000_000

// scalePartitions are the signal topic's partitions, shared by the two replicas' consumer group.
const scalePartitions = 4

// scaleGroup is the replicas' one consumer group.
const scaleGroup = "hbbench-scale"

// scaleTypes are the fleet's meters (2 h, as a large fleet of meters) and the burst's devices, whose
// timeout (three bursts' windows) outlasts their signals' ingest, so detection is measured after it, not
// beside it.
func scaleTypes(window time.Duration) string {
	return fmt.Sprintf(`
  default: {timeout: 2h}
  burst: {timeout: %s, repeat_every: 0s}`, 3*window)
}

// scaleFigures is what one size measured.
type scaleFigures struct {
	devices     int
	importRate  float64 // rows/s
	bytesPer    float64 // Redis used_memory growth per expected device
	signalBytes float64 // Redis used_memory growth per device that signalled once over Kafka
	idleCores   float64 // Redis used_cpu_user+sys over the idle interval, in cores
	topCommands string
	burst       int
	late        burstLateness
	statsMs     float64 // GET /v1/stats
	listMs      float64 // GET /v1/devices?state=interrupted&limit=100
	pageMs      float64 // GET /
	rssMB       float64 // the larger VmHWM of the two replicas
	kill        killFigures
}

// scaleScenario runs scaleSize for each of -scale-sizes on a flushed Redis, then adds each larger
// size's figures as ratios to the first's.
func scaleScenario(e *env) error {
	var all []scaleFigures
	for i, n := range e.opts.ScaleSizes {
		if i > 0 {
			if err := e.redis.flush(e.ctx); err != nil {
				return err
			}
		}
		f, err := scaleSize(e, n)
		if err != nil {
			return fmt.Errorf("%d devices: %w", n, err)
		}
		all = append(all, f)
	}
	base := all[0]
	for _, f := range all[1:] {
		note := fmt.Sprintf("%d against %d devices", f.devices, base.devices)
		ratio := func(metric string, a, b float64) { e.add("scale", metric, a/b, "×", note) }
		ratio("import time ratio", float64(f.devices)/f.importRate, float64(base.devices)/base.importRate)
		ratio("memory ratio", f.bytesPer*float64(f.devices), base.bytesPer*float64(base.devices))
		ratio("signalling memory per device ratio", f.signalBytes, base.signalBytes)
		ratio("idle Redis CPU ratio", f.idleCores, base.idleCores)
		ratio("idle Redis CPU per device ratio", f.idleCores/float64(f.devices), base.idleCores/float64(base.devices))
		ratio("lateness p99 ratio", benchrig.Ms(f.late.p99), benchrig.Ms(base.late.p99))
		ratio("GET /v1/stats ratio", f.statsMs, base.statsMs)
		ratio("devices listing ratio", f.listMs, base.listMs)
		ratio("GET / ratio", f.pageMs, base.pageMs)
		ratio("replica VmHWM ratio", f.rssMB, base.rssMB)
		ratio("slot takeover ratio", f.kill.takeover.Seconds(), base.kill.takeover.Seconds())
		ratio("dead share read again ratio", f.kill.shareRead.Seconds(), base.kill.shareRead.Seconds())
		ratio("survivor /readyz ratio", f.kill.ready.Seconds(), base.kill.ready.Seconds())
	}
	return nil
}

// scaleSize starts two replicas of the binary on hbbench's Redis and one kfake broker, in one consumer
// group, imports n expected devices over POST /v1/devices:import, then measures Redis memory per device,
// Redis's CPU over -scale-idle with nothing signalling, the API's latency, a burst of n/10 devices
// signalling once over Kafka (memory per device, the lateness of their deadlines), each replica's peak
// RSS, and what a SIGKILL of one replica costs.
func scaleSize(e *env, n int) (f scaleFigures, err error) {
	f.devices = n
	k, err := benchrig.Kafka(scalePartitions, signalTopic, benchrig.EventsTopic, "heartbeat.deadletter")
	if err != nil {
		return f, err
	}
	defer k.Close()
	var replicas []*testenv.Heartbeatd
	defer func() {
		for i, hb := range replicas {
			if err != nil {
				err = fmt.Errorf("%w\nreplica %d log:\n%s", err, i, hb.LogTail())
			}
			hb.Close()
		}
	}()
	for range 2 {
		hb, err := launchOnKafkaWith(e, k, e.opts.HeartbeatdBin, scaleGroup, scaleTypes(e.opts.ScaleWindow))
		if err != nil {
			return f, err
		}
		replicas = append(replicas, hb)
	}
	tag := fmt.Sprintf("%dk", n/1000)
	if err := scaleFleet(e, replicas[0], tag, &f); err != nil {
		return f, err
	}
	if err := scaleQuiet(e, replicas[0], tag, &f); err != nil {
		return f, err
	}
	if err := scaleBurst(e, k, replicas, tag, &f); err != nil {
		return f, err
	}
	for i, hb := range replicas {
		st, err := procStatus(hb.PID(), "VmHWM")
		if err != nil {
			return f, err
		}
		mb := float64(st["VmHWM"]) / 1024
		f.rssMB = max(f.rssMB, mb)
		e.add("scale", fmt.Sprintf("%s replica %d VmHWM", tag, i+1), mb, "MiB", "peak RSS (/proc/pid/status) after import, idle and burst")
	}
	if f.kill, err = killReplica(e, k, replicas[0], replicas[1]); err != nil {
		return f, err
	}
	f.kill.report(e, tag)
	return f, nil
}
