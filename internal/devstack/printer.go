package devstack

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// clock renders a time of day for the console, "-" when the event carries none.
func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("15:04:05.000")
}

// eventLine renders one event value (JSON, docs/events.md) as the line dev mode prints, e.g.
// "INTERRUPTED gw-017 (gateway) silent 5.0s deadline 18:42:10.000".
func eventLine(value []byte) (string, error) {
	ev, err := event.Decode(value)
	if err != nil {
		return "", fmt.Errorf("devstack: %w", err)
	}
	who := ev.DeviceID
	if ev.DeviceType != "" {
		who += " (" + ev.DeviceType + ")"
	}
	silent := silence(ev.SilentForMs)
	switch ev.Kind {
	case event.Interrupted:
		return fmt.Sprintf("INTERRUPTED %s silent %s deadline %s%s%s", who, silent, clock(ev.Deadline), inOutage(ev), cause(ev)), nil
	case event.Late:
		return fmt.Sprintf("LATE %s silent %s: interrupted at its timeout unless it signals", who, silent), nil
	case event.Suppressed:
		return fmt.Sprintf("SUPPRESSED %s silent %s: its parent %s is interrupted", who, silent, ev.Parent), nil
	case event.OutageStarted:
		return fmt.Sprintf("OUTAGE STARTED %s: %d devices silent (%s)", outageGroup(ev), ev.Count, ev.OutageID), nil
	case event.OutageEnded:
		// Its deadline is when the outage started; its count, the members still silent as it ends.
		return fmt.Sprintf("OUTAGE ENDED %s after %s: %d devices still silent (%s)", outageGroup(ev),
			silence(ev.At.Sub(ev.Deadline).Milliseconds()), ev.Count, ev.OutageID), nil
	case event.Alarm:
		return fmt.Sprintf("ALARM #%d %s silent %s deadline %s", ev.Repeat, who, silent, clock(ev.Deadline)), nil
	case event.Recovered:
		return fmt.Sprintf("RECOVERED %s after %s", who, silent), nil
	case event.Exhausted:
		return fmt.Sprintf("EXHAUSTED %s silent %s after %d alarms; quiet until it recovers", who, silent, ev.Repeat), nil
	case event.Watchdog:
		return fmt.Sprintf("WATCHDOG replica %s: scanner → Kafka path alive", ev.DeviceID), nil
	default:
		return fmt.Sprintf("%s %s silent %s repeat %d", strings.ToUpper(string(ev.Kind)), who, silent, ev.Repeat), nil
	}
}

// cause says why an incident began when it was not silence, "" for silence.
func cause(ev event.Event) string {
	switch {
	case ev.Cause == "":
		return ""
	case ev.Reason != "":
		return fmt.Sprintf(": %s (%s)", ev.Cause, ev.Reason)
	}
	return ": " + ev.Cause
}

// inOutage names the correlated outage a device's event belongs to, "" for none.
func inOutage(ev event.Event) string {
	if ev.OutageID == "" {
		return ""
	}
	return " in " + ev.OutageID
}

// outageGroup renders what an outage's devices share, "device_type=meter"; the event's device id when
// the group is missing.
func outageGroup(ev event.Event) string {
	if ev.Group == nil {
		return ev.DeviceID
	}
	return ev.Group.By + "=" + ev.Group.Value
}

// silence renders an outage length for people: "5.0s", "2m05.3s", "3h07m12s".
func silence(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		m := d / time.Minute
		return fmt.Sprintf("%dm%04.1fs", m, (d - m*time.Minute).Seconds())
	default:
		h := d / time.Hour
		m := (d - h*time.Hour) / time.Minute
		return fmt.Sprintf("%dh%02dm%02ds", h, m, (d-h*time.Hour-m*time.Minute)/time.Second)
	}
}

// printEvents logs every event published on topic and stamped at or after since as one readable line
// (see eventLine) until ctx is done, then returns nil. It reads every partition without a consumer group,
// so events published while it connects are not lost.
func printEvents(ctx context.Context, brokers []string, topic string, logger *zap.Logger, since time.Time) error {
	if logger == nil {
		logger = zap.NewNop()
	}
	log := logger.With(zap.String("component", "events"))
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeStartOffset(kgo.NewOffset().AfterMilli(since.UnixMilli())),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.FetchMaxWait(time.Second),
	)
	if err != nil {
		return fmt.Errorf("devstack: event printer: %w", err)
	}
	defer cl.Close()
	failing := false
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var fetchErr error
		fetches.EachError(func(_ string, _ int32, err error) { fetchErr = err })
		if fetchErr != nil {
			if !failing {
				log.Warn("reading events failed; retrying", zap.String("topic", topic), zap.Error(fetchErr))
			}
			failing = true
			// The client retries by itself; this pause only keeps a persistent error from spinning.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			continue
		}
		if failing {
			failing = false
			log.Info("reading events works again", zap.String("topic", topic))
		}
		fetches.EachRecord(func(r *kgo.Record) {
			line, err := eventLine(r.Value)
			if err != nil {
				log.Warn("undecodable event", zap.ByteString("key", r.Key), zap.ByteString("value", r.Value), zap.Error(err))
				return
			}
			log.Info(line)
		})
	}
}
