package config

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Outputs are destinations besides the events topic. Kafka stays the system of record: an output
// follows the events Kafka acknowledged and never blocks or slows them.
type Outputs struct {
	// Alertmanager posts open incidents to Alertmanager's v2 API as alerts (docs/alertmanager.md); off while URLs is
	// empty.
	Alertmanager Alertmanager `yaml:"alertmanager"`
}

// Alertmanager is outputs.alertmanager. Zero durations take the defaults below, so the reference config
// can state the built-in values as zero.
type Alertmanager struct {
	// URLs are Alertmanager base URLs ("http://am:9093", or with a path prefix behind a proxy); every
	// alert goes to each of them, as Alertmanager's HA setup wants.
	URLs []string `yaml:"urls"`
	// ResendEvery is how often the open incidents are posted again; each alert ends
	// AlertmanagerEndsAfter resends later unless it is posted again. 0 = DefaultAlertmanagerResendEvery.
	ResendEvery time.Duration `yaml:"resend_every"`
	// Labels are added to every alert, each "name=value" (a list, so HEARTBEATD_OUTPUTS_ALERTMANAGER_LABELS
	// can set them: team=iot,env=prod).
	Labels []string `yaml:"labels"`
	// Timeout bounds one POST. 0 = DefaultAlertmanagerTimeout.
	Timeout time.Duration `yaml:"timeout"`
	TLS     TLS           `yaml:"tls"`
	// Token is sent as "Authorization: Bearer <token>" (an Alertmanager behind an authenticating proxy).
	Token     string `yaml:"token"`
	TokenFile string `yaml:"token_file"`
}

// Defaults of outputs.alertmanager.
const (
	DefaultAlertmanagerResendEvery = time.Minute
	DefaultAlertmanagerTimeout     = 10 * time.Second
	// AlertmanagerEndsAfter: an alert's endsAt is this many resend intervals ahead, so it outlives a few
	// missed resends (Alertmanager down, a slot changing hands) but resolves itself if heartbeatd stops.
	AlertmanagerEndsAfter = 4
)

// Enabled reports whether alerts are posted.
func (a Alertmanager) Enabled() bool { return len(a.URLs) > 0 }

// Resend is resend_every with its default applied.
func (a Alertmanager) Resend() time.Duration {
	if a.ResendEvery <= 0 {
		return DefaultAlertmanagerResendEvery
	}
	return a.ResendEvery
}

// PostTimeout is timeout with its default applied.
func (a Alertmanager) PostTimeout() time.Duration {
	if a.Timeout <= 0 {
		return DefaultAlertmanagerTimeout
	}
	return a.Timeout
}

// LabelSet is labels as a map (validated: every entry is name=value).
func (a Alertmanager) LabelSet() map[string]string {
	out := make(map[string]string, len(a.Labels))
	for _, l := range a.Labels {
		name, value, _ := strings.Cut(l, "=")
		out[strings.TrimSpace(name)] = strings.TrimSpace(value)
	}
	return out
}

// AlertmanagerOwnLabels are the labels heartbeatd sets on its alerts; outputs.alertmanager.labels may
// not override them, or alerts would stop matching their resolves.
var AlertmanagerOwnLabels = []string{"alertname", "device_id", "device_type", "parent", "inhibited_by", "outage_id",
	"group_by", "group_value"}

// labelName is Prometheus' label name syntax; names starting with __ are reserved.
var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

func (c *Config) validateOutputs(v *validator) {
	a := c.Outputs.Alertmanager
	const key = "outputs.alertmanager"
	https := false
	for i, raw := range a.URLs {
		k := fmt.Sprintf("%s.urls[%d]", key, i)
		// Quoted redacted (RedactURL), as every configured URL in an error: these errors are printed by
		// check-config, logged by a reload and answered by /-/reload.
		u, err := url.Parse(raw)
		shown := RedactURL(raw)
		switch {
		case err != nil:
			v.add(k, "%q is not a URL", shown)
		case u.Scheme != "http" && u.Scheme != "https":
			v.add(k, "%q: want an http:// or https:// base URL", shown)
		case u.Host == "":
			v.add(k, "%q: no host", shown)
		case u.User != nil:
			// It would be printed with the config; the bearer token has a *_file and is redacted.
			v.add(k, "%q: credentials in the URL: use %s.token or token_file", shown, key)
		case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
			v.add(k, "%q: a base URL has no query or fragment (a key in it would be logged with the URL: use %s.token or token_file)", shown, key)
		}
		https = https || (err == nil && u.Scheme == "https")
	}
	if a.ResendEvery < 0 || (a.ResendEvery > 0 && a.ResendEvery < time.Second) {
		v.add(key+".resend_every", "%s: want 0 (the default, %s) or at least 1s", FormatDuration(a.ResendEvery),
			FormatDuration(DefaultAlertmanagerResendEvery))
	}
	v.nonNegative(key+".timeout", a.Timeout)
	seen := map[string]bool{}
	for i, l := range a.Labels {
		k := fmt.Sprintf("%s.labels[%d]", key, i)
		name, value, ok := strings.Cut(l, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		switch {
		case !ok || value == "":
			v.add(k, "%q: want name=value", l)
		case !labelName.MatchString(name) || strings.HasPrefix(name, "__"):
			v.add(k, "%q is not a label name (letters, digits and _, not starting with a digit or __)", name)
		case slices.Contains(AlertmanagerOwnLabels, name):
			v.add(k, "%q is set by heartbeatd itself (%s)", name, strings.Join(AlertmanagerOwnLabels, ", "))
		case seen[name]:
			v.add(k, "%q twice", name)
		}
		seen[name] = true
	}
	validateTLS(v, key+".tls", a.TLS)
	if a.TLS.Enabled && len(a.URLs) > 0 && !https {
		v.add(key+".tls.enabled", "true, but no url is https://: the block would not be used")
	}
}
