package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/internal/output/alertmanager"
)

// output is a loop that runs beside the scanners for an observer (an output that follows Kafka).
type output struct {
	name string
	run  func(ctx context.Context) error
}

// buildObservers makes what follows the events Kafka acknowledged: each gets them through
// event.Observed after the publisher, so none can block or slow the Kafka path.
func (d *daemon) buildObservers(reg prometheus.Registerer) error {
	// The status page's live streams and recent events: bounded queues, a slow page is dropped.
	d.stream = newEventStream(StreamOptions{PerToken: d.cfg.HTTP.MaxStreamsPerToken, Registerer: reg, Logger: d.log})
	d.observers = append(d.observers, d.stream)
	if am := d.cfg.Outputs.Alertmanager; am.Enabled() {
		if err := d.buildAlertmanager(am, reg); err != nil {
			return err
		}
	}
	return nil
}

// buildAlertmanager wires outputs.alertmanager. The silences and the correlator are built after the
// observers (they publish through the observed sink), so they are read when the output runs.
func (d *daemon) buildAlertmanager(am config.Alertmanager, reg prometheus.Registerer) error {
	tlsCfg, err := am.TLS.Build()
	if err != nil {
		return fmt.Errorf("outputs.alertmanager.tls: %w", err)
	}
	out, err := alertmanager.New(alertmanager.Options{URLs: am.URLs, ResendEvery: am.Resend(), Labels: am.LabelSet(),
		Timeout: am.PostTimeout(), TLS: tlsCfg, Token: am.Token,
		Store: d.store, Slots: d.ownership.Slots,
		Silenced: func(device, typ string, now time.Time) bool {
			return d.silences.SilencedUntil(device, typ, now).After(now)
		},
		Silence: func(id string) (string, string, bool) {
			s, ok := d.silences.Lookup(id)
			return s.DeviceID, s.DeviceType, ok
		},
		Outages:  func(ctx context.Context) ([]correlate.Outage, error) { return d.correlator.OpenOutages(ctx) },
		OutageOf: d.outageMembers,
		Now:      d.clock.Now, Logger: d.log, Registerer: reg})
	if err != nil {
		return err
	}
	d.observers = append(d.observers, out)
	d.outputs = append(d.outputs, output{name: "alertmanager output", run: out.Run})
	return nil
}

// outageMembers names the open outage each incident is a member of, as the alarm loop marks its
// interrupted event: the open outage of the device's first group that has one, if it began before the
// interruption was reported.
func (d *daemon) outageMembers(ctx context.Context, incs []alertmanager.Incident) ([]string, error) {
	members := make([]correlate.Member, len(incs))
	for i, inc := range incs {
		members[i] = correlate.Member{Device: inc.Device, Type: inc.Type, Parent: inc.Parent, InterruptedAt: inc.InterruptedAt}
	}
	_, out, err := d.correlator.Covering(ctx, members)
	return out, err
}
