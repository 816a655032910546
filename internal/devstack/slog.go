package devstack

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newSlogLogger routes the MQTT broker's slog output into zap, so dev mode has one log. The broker's info
// lines (every client connect and disconnect) become debug: the dev log is about the fleet and its alarms.
func newSlogLogger(log *zap.Logger) *slog.Logger {
	return slog.New(&zapHandler{log: log})
}

type zapHandler struct {
	log    *zap.Logger
	fields []zap.Field
	group  string
}

func zapLevel(l slog.Level) zapcore.Level {
	switch {
	case l >= slog.LevelError:
		return zapcore.ErrorLevel
	case l >= slog.LevelWarn:
		return zapcore.WarnLevel
	default:
		return zapcore.DebugLevel
	}
}

func (h *zapHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.log.Core().Enabled(zapLevel(l))
}

func (h *zapHandler) Handle(_ context.Context, r slog.Record) error {
	ce := h.log.Check(zapLevel(r.Level), r.Message)
	if ce == nil {
		return nil
	}
	fields := make([]zap.Field, len(h.fields), len(h.fields)+r.NumAttrs())
	copy(fields, h.fields)
	r.Attrs(func(a slog.Attr) bool {
		fields = append(fields, h.field(a))
		return true
	})
	ce.Write(fields...)
	return nil
}

func (h *zapHandler) field(a slog.Attr) zap.Field {
	key := a.Key
	if h.group != "" {
		key = h.group + "." + key
	}
	return zap.Any(key, a.Value.Resolve().Any())
}

func (h *zapHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := &zapHandler{log: h.log, group: h.group, fields: append([]zap.Field(nil), h.fields...)}
	for _, a := range attrs {
		n.fields = append(n.fields, h.field(a))
	}
	return n
}

func (h *zapHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	g := name
	if h.group != "" {
		g = h.group + "." + name
	}
	return &zapHandler{log: h.log, fields: h.fields, group: g}
}
