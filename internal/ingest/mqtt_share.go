package ingest

import (
	"context"
	"slices"
	"strings"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"go.uber.org/zap"
)

// The MQTT source's side of shared subscriptions ($share/<group>/<filter>): the shares it reads with
// the other replicas (Sharing in message.go; the hold-back follows their members, internal/holdback/member.go),
// and taking a dead member's session over so its share moves to the living at once.

// takeover is the state of taking a dead member's session over (TakenOver).
type takeover struct {
	running bool
	tried   time.Time // local clock
	done    time.Time // the shared clock (Now); zero until it succeeded
}

// takeoverRetry is the least time between two attempts to take one session over.
const takeoverRetry = 2 * time.Second

// shared reports whether a subscription is shared with other replicas.
func (s *MQTTSource) shared() bool {
	return slices.ContainsFunc(s.opts.Subscriptions, func(sub Subscription) bool { return sub.SharedGroup != "" })
}

// Shares implements Sharing: each shared subscription splits its filter's messages among the replicas
// of its group. The broker ends the session of a dead member once 1.5 keep-alives pass without a packet; the margin
// covers the broker's check interval.
func (s *MQTTSource) Shares() []holdback.Share {
	var out []holdback.Share
	for i, sub := range s.opts.Subscriptions {
		if sub.SharedGroup == "" {
			continue
		}
		filter := s.templates[i].filter
		out = append(out, holdback.Share{Name: "mqtt:" + filter, Signals: "mqtt:" + strings.TrimPrefix(filter, "$share/"+sub.SharedGroup+"/"),
			Member: s.opts.ClientID, Release: s.opts.KeepAlive*3/2 + 2*time.Second})
	}
	return out
}

// TakenOver implements Sharing. It connects once as the dead member, with a clean session, and
// disconnects: the broker closes the member's connection, whatever state it is in (a client id is one
// session, MQTT 3.1.1 §3.1.4), and ends its session, so its share goes to the live members at once
// rather than after 1.5 keep-alives. True once that succeeded after since.
func (s *MQTTSource) TakenOver(member string, since time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.takeovers[member]
	switch {
	case t != nil && !t.done.IsZero() && !t.done.Before(since):
		return true
	case s.ctx == nil || s.ended || member == s.opts.ClientID:
		return false
	case t == nil:
		t = &takeover{}
		s.takeovers[member] = t
	case t.running || time.Since(t.tried) < takeoverRetry:
		return false
	}
	t.running, t.tried = true, time.Now()
	ctx := s.ctx
	s.takingOver.Go(func() { s.takeOver(ctx, member, t) })
	return false
}

func (s *MQTTSource) takeOver(ctx context.Context, member string, t *takeover) {
	o := s.connectionOptions().SetClientID(member).SetCleanSession(true).SetAutoReconnect(false).SetConnectRetry(false)
	c := mqtt.NewClient(o)
	tok := c.Connect()
	var err error
	select {
	case <-tok.Done():
		err = tok.Error()
	case <-ctx.Done():
		err = ctx.Err()
	}
	c.Disconnect(100)
	s.mu.Lock()
	defer s.mu.Unlock()
	t.running = false
	if err != nil {
		s.log.Warn("could not take over the MQTT session of a dead replica; its share waits for the broker to drop it",
			zap.String("client_id", member), zap.Error(err))
		return
	}
	t.done = s.opts.Now()
	s.log.Info("took over the MQTT session of a dead replica: the broker hands its share to the live ones",
		zap.String("client_id", member))
}
