package config

import (
	"errors"
	"fmt"
	"net/mail"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"
)

// Notify is the `notify` block: heartbeatd pages people itself, as a consumer group of its own events
// topic (docs/notifications.md). Its templates and matchers are checked by internal/notify (CheckNotify in
// the daemon), which owns their functions; this file checks the structure.
type Notify struct {
	// Enabled runs the notifier inside the daemon; `heartbeatd notify` runs it alone either way.
	Enabled bool `yaml:"enabled"`
	// GroupID is the notifier's Kafka consumer group on events.kafka.topic.
	GroupID   string           `yaml:"group_id"`
	Receivers []NotifyReceiver `yaml:"receivers"`
	Routes    []NotifyRoute    `yaml:"routes"`
	// GiveUpAfter: a notification a receiver keeps refusing for this long is dead-lettered, so the
	// retries kept in Redis have a bound lifetime. 0 = DefaultNotifyGiveUpAfter.
	GiveUpAfter time.Duration `yaml:"give_up_after"`
}

// NotifyReceiver is one destination; exactly one of its kinds is set.
type NotifyReceiver struct {
	Name string `yaml:"name"`
	// Rate is "N/s", "N/m" or "N/h" (default 1/s) and Burst how many may go at once (default 10):
	// beyond them a storm is folded into one summary message per interval.
	Rate  string `yaml:"rate"`
	Burst int    `yaml:"burst"`
	// Timeout bounds one delivery; 0 = DefaultNotifyTimeout.
	Timeout   time.Duration    `yaml:"timeout"`
	PagerDuty *NotifyPagerDuty `yaml:"pagerduty,omitempty"`
	Slack     *NotifySlack     `yaml:"slack,omitempty"`
	Webhook   *NotifyWebhook   `yaml:"webhook,omitempty"`
	Email     *NotifyEmail     `yaml:"email,omitempty"`
}

// NotifyPagerDuty is PagerDuty's Events API v2.
type NotifyPagerDuty struct {
	RoutingKey     string `yaml:"routing_key"`
	RoutingKeyFile string `yaml:"routing_key_file"`
	// URL overrides the Events API endpoint (as Alertmanager's pagerduty_configs url).
	URL string `yaml:"url"`
	// Summary is the text/template of payload.summary; "" = the built-in one.
	Summary string `yaml:"summary"`
}

// NotifySlack is a Slack incoming webhook.
type NotifySlack struct {
	WebhookURL     string `yaml:"webhook_url"`
	WebhookURLFile string `yaml:"webhook_url_file"`
	// Text is the text/template of the message; "" = the built-in one.
	Text string `yaml:"text"`
}

// NotifyWebhook is any HTTP endpoint.
type NotifyWebhook struct {
	URL     string                  `yaml:"url"`
	Method  string                  `yaml:"method"` // default POST
	Headers map[string]NotifyHeader `yaml:"headers"`
	// Body is the text/template of the request body; "" = the event as JSON with its labels.
	Body string `yaml:"body"`
	TLS  TLS    `yaml:"tls"`
}

// NotifyHeader is a header value: a plain string, "${ENV}", or {file: path} for a secret.
type NotifyHeader struct {
	Value string
	File  string
}

// UnmarshalYAML reads a scalar or {file: path}, nothing else.
func (h *NotifyHeader) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		h.Value = n.Value
		return nil
	}
	var f struct {
		File string `yaml:"file"`
	}
	if n.Kind != yaml.MappingNode || len(n.Content) != 2 || n.Content[0].Value != "file" {
		return fmt.Errorf("line %d: a header is a string or {file: path}", n.Line)
	}
	if err := n.Decode(&f); err != nil {
		return err
	}
	h.File = f.File
	return nil
}

// MarshalYAML prints the value (Redacted has replaced a secret one).
func (h NotifyHeader) MarshalYAML() (any, error) { return h.Value, nil }

// NotifyEmail is SMTP with STARTTLS and authentication.
type NotifyEmail struct {
	// Smarthost is host:port; the session goes TLS with STARTTLS whenever the server offers it, and
	// must when a username is set (credentials never cross in clear).
	Smarthost    string   `yaml:"smarthost"`
	From         string   `yaml:"from"`
	To           []string `yaml:"to"`
	Username     string   `yaml:"username"`
	Password     string   `yaml:"password"`
	PasswordFile string   `yaml:"password_file"`
	// Subject and Body are text/templates; "" = the built-in ones.
	Subject string `yaml:"subject"`
	Body    string `yaml:"body"`
	// TLS tunes STARTTLS (ca_file, server_name, insecure_skip_verify); enabled is not needed.
	TLS TLS `yaml:"tls"`
}

// NotifyRoute sends the events it matches to a receiver.
type NotifyRoute struct {
	// Match are Alertmanager matchers (`site=~"ber.*"`) over labels, device_type, device_id, parent and
	// cause; all must match. Empty matches every device.
	Match    []string `yaml:"match"`
	Receiver string   `yaml:"receiver"`
	// Kinds the route takes; empty = DefaultNotifyKinds.
	Kinds []string `yaml:"kinds"`
	// Repeat sends `alarm` repeats too.
	Repeat bool `yaml:"repeat"`
	// Continue goes on to the next route after a match; otherwise the first match wins.
	Continue bool `yaml:"continue"`
}

// Defaults of the notify block.
const (
	DefaultNotifyGroupID     = "heartbeatd-notify"
	DefaultNotifyRate        = "1/s"
	DefaultNotifyBurst       = 10
	DefaultNotifyTimeout     = 10 * time.Second
	DefaultNotifyGiveUpAfter = 24 * time.Hour
)

// DefaultNotifyKinds are what a route without `kinds` takes.
var DefaultNotifyKinds = []string{"interrupted", "recovered", "outage_started", "outage_ended"}

// notifyKinds are the event kinds a route may name (watchdog never: it is not news to a person).
var notifyKinds = []string{"late", "interrupted", "alarm", "recovered", "exhausted", "suppressed", "outage_started",
	"outage_ended", "flapping", "acked", "silenced", "unsilenced", "deleted"}

// receiverName keeps names usable in Redis keys, metric labels and the command line.
var receiverName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$`)

// envRef is a whole value written as ${NAME}.
var envRef = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$`)

// RateLimit is a receiver's rate: Every is the interval one token takes, Burst the bucket.
func (r NotifyReceiver) RateLimit() (every time.Duration, burst int, err error) {
	s := r.Rate
	if s == "" {
		s = DefaultNotifyRate
	}
	n, unit, ok := strings.Cut(s, "/")
	count, perr := strconv.Atoi(strings.TrimSpace(n))
	per := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[strings.TrimSpace(unit)]
	if !ok || perr != nil || count <= 0 || per == 0 {
		return 0, 0, fmt.Errorf("%q: want N/s, N/m or N/h with N > 0", r.Rate)
	}
	burst = r.Burst
	if burst == 0 {
		burst = DefaultNotifyBurst
	}
	return per / time.Duration(count), burst, nil
}

// DeliveryTimeout is timeout with its default applied.
func (r NotifyReceiver) DeliveryTimeout() time.Duration {
	if r.Timeout <= 0 {
		return DefaultNotifyTimeout
	}
	return r.Timeout
}

// Kind names the receiver's one kind ("" when none or several are set).
func (r NotifyReceiver) Kind() string {
	var kinds []string
	if r.PagerDuty != nil {
		kinds = append(kinds, "pagerduty")
	}
	if r.Slack != nil {
		kinds = append(kinds, "slack")
	}
	if r.Webhook != nil {
		kinds = append(kinds, "webhook")
	}
	if r.Email != nil {
		kinds = append(kinds, "email")
	}
	if len(kinds) != 1 {
		return ""
	}
	return kinds[0]
}

// RouteKinds is a route's kinds with the default applied.
func (r NotifyRoute) RouteKinds() []string {
	if len(r.Kinds) == 0 {
		return DefaultNotifyKinds
	}
	return r.Kinds
}

// GiveUp is give_up_after with its default applied.
func (n Notify) GiveUp() time.Duration {
	if n.GiveUpAfter <= 0 {
		return DefaultNotifyGiveUpAfter
	}
	return n.GiveUpAfter
}

// notifySecrets lists every secret string of the notify block with its key: the only ones that may not be
// written inline (docs/notifications.md: files or ${ENV}).
func (n *Notify) notifySecrets() map[string]*string {
	out := map[string]*string{}
	for i := range n.Receivers {
		r := &n.Receivers[i]
		k := fmt.Sprintf("notify.receivers[%d]", i)
		if r.PagerDuty != nil {
			out[k+".pagerduty.routing_key"] = &r.PagerDuty.RoutingKey
		}
		if r.Slack != nil {
			out[k+".slack.webhook_url"] = &r.Slack.WebhookURL
		}
		if r.Email != nil {
			out[k+".email.password"] = &r.Email.Password
		}
	}
	return out
}

// resolveNotifySecrets replaces each ${NAME} secret with its variable, refuses inline secrets, and reads
// headers written as {file: …}. It runs before readSecretFiles, while an inline value can still be told
// from one read from its file.
func resolveNotifySecrets(cfg *Config, env func(string) (string, bool)) error {
	v := &validator{}
	lookup := func(key, s string) (string, bool) {
		m := envRef.FindStringSubmatch(s)
		if m == nil {
			return s, false
		}
		val, ok := "", false
		if env != nil {
			val, ok = env(m[1])
		}
		if !ok || val == "" {
			v.add(key, "${%s} is not set in the environment", m[1])
		}
		return val, true
	}
	for key, p := range cfg.Notify.notifySecrets() {
		if *p == "" {
			continue
		}
		val, fromEnv := lookup(key, *p)
		if !fromEnv {
			v.add(key, "a secret is not written inline: use %s_file or ${ENV}", key[strings.LastIndex(key, ".")+1:])
			continue
		}
		*p = val
	}
	for i := range cfg.Notify.Receivers {
		w := cfg.Notify.Receivers[i].Webhook
		if w == nil {
			continue
		}
		for name, h := range w.Headers {
			key := fmt.Sprintf("notify.receivers[%d].webhook.headers.%s", i, name)
			if h.File != "" {
				s, err := readSecret(h.File)
				if err != nil {
					v.add(key, "%v", err)
				}
				h.Value = s
			} else {
				h.Value, _ = lookup(key, h.Value)
			}
			w.Headers[name] = h
		}
	}
	return errors.Join(v.errs...)
}

func (c *Config) validateNotify(v *validator) {
	n := c.Notify
	if len(n.Receivers) == 0 && len(n.Routes) == 0 && !n.Enabled {
		return
	}
	if v.required("notify.group_id", n.GroupID) && n.GroupID == c.Ingest.Kafka.GroupID {
		// One group reading two topics for two purposes would hand each member's partitions to the other.
		v.add("notify.group_id", "%q is ingest.kafka.group_id too: the notifier needs a group of its own", n.GroupID)
	}
	v.nonNegative("notify.give_up_after", n.GiveUpAfter)
	if n.Enabled && len(n.Routes) == 0 {
		v.add("notify.routes", "notify.enabled needs at least one route")
	}
	names := map[string]bool{}
	for i, r := range n.Receivers {
		k := fmt.Sprintf("notify.receivers[%d]", i)
		switch {
		case !receiverName.MatchString(r.Name):
			v.add(k+".name", "%q: want 1–64 letters, digits, '_', '.', '-', starting with a letter or digit", r.Name)
		case names[r.Name]:
			v.add(k+".name", "%q twice", r.Name)
		}
		names[r.Name] = true
		if _, _, err := r.RateLimit(); err != nil {
			v.add(k+".rate", "%v", err)
		}
		if r.Burst < 0 {
			v.add(k+".burst", "must not be negative")
		}
		v.nonNegative(k+".timeout", r.Timeout)
		if r.Kind() == "" {
			v.add(k, "set exactly one of pagerduty, slack, webhook, email")
			continue
		}
		validateReceiverKind(v, k, r)
	}
	for i, r := range n.Routes {
		k := fmt.Sprintf("notify.routes[%d]", i)
		if v.required(k+".receiver", r.Receiver) && !names[r.Receiver] {
			v.add(k+".receiver", "%q is not a receiver", r.Receiver)
		}
		for j, kind := range r.Kinds {
			if !slices.Contains(notifyKinds, kind) {
				v.add(fmt.Sprintf("%s.kinds[%d]", k, j), "%q: want one of %s", kind, strings.Join(notifyKinds, ", "))
			}
		}
	}
}

func validateReceiverKind(v *validator, k string, r NotifyReceiver) {
	switch {
	case r.PagerDuty != nil:
		v.required(k+".pagerduty.routing_key", r.PagerDuty.RoutingKey)
		if r.PagerDuty.URL != "" {
			httpURL(v, k+".pagerduty.url", r.PagerDuty.URL)
		}
	case r.Slack != nil:
		if v.required(k+".slack.webhook_url", r.Slack.WebhookURL) {
			httpURL(v, k+".slack.webhook_url", r.Slack.WebhookURL)
		}
	case r.Webhook != nil:
		if v.required(k+".webhook.url", r.Webhook.URL) {
			httpURL(v, k+".webhook.url", r.Webhook.URL)
		}
		if m := r.Webhook.Method; m != "" && !regexp.MustCompile(`^[A-Z]+$`).MatchString(m) {
			v.add(k+".webhook.method", "%q: want an upper-case HTTP method", m)
		}
		validateTLS(v, k+".webhook.tls", r.Webhook.TLS)
	case r.Email != nil:
		e := r.Email
		hostPort(v, k+".email.smarthost", e.Smarthost)
		if _, err := mail.ParseAddress(e.From); err != nil {
			v.add(k+".email.from", "%q: %v", e.From, err)
		}
		if len(e.To) == 0 {
			v.add(k+".email.to", "required")
		}
		for j, to := range e.To {
			if _, err := mail.ParseAddress(to); err != nil {
				v.add(fmt.Sprintf("%s.email.to[%d]", k, j), "%q: %v", to, err)
			}
		}
		if (e.Username == "") != (e.Password == "") {
			v.add(k+".email", "username and password go together")
		}
	}
}

// httpURL checks an endpoint's URL without printing its secret parts.
func httpURL(v *validator, key, raw string) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		v.add(key, "%q is not a URL", RedactURL(raw))
	case u.Scheme != "http" && u.Scheme != "https":
		v.add(key, "%q: want http:// or https://", RedactURL(raw))
	case u.Host == "":
		v.add(key, "%q: no host", RedactURL(raw))
	}
}

// redactNotify blanks what secretWalk does not know in Redacted's copy: every header value (a header is
// often a key) and the URLs' secret parts.
func redactNotify(n *Notify) {
	for i := range n.Receivers {
		r := &n.Receivers[i]
		if r.Webhook != nil {
			r.Webhook.URL = RedactURL(r.Webhook.URL)
			for name, h := range r.Webhook.Headers {
				n.Receivers[i].Webhook.Headers[name] = NotifyHeader{Value: Redaction, File: h.File}
			}
		}
		if r.PagerDuty != nil {
			r.PagerDuty.URL = RedactURL(r.PagerDuty.URL)
		}
	}
}

// NotifyTable is check-config's summary of the notify block: receivers and routes, no secret.
func (c *Config) NotifyTable() string {
	n := c.Notify
	if len(n.Receivers) == 0 {
		return "notifications: none\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "notifications (group %s, in this process: %t):\n", n.GroupID, n.Enabled)
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ROUTE\tMATCH\tRECEIVER\tKIND\tKINDS\tREPEAT\tCONTINUE")
	kinds := map[string]string{}
	for _, r := range n.Receivers {
		kinds[r.Name] = r.Kind()
	}
	for i, r := range n.Routes {
		match := strings.Join(r.Match, ", ")
		if match == "" {
			match = "every device"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%t\t%t\n", i, match, r.Receiver, kinds[r.Receiver],
			strings.Join(r.RouteKinds(), ","), r.Repeat, r.Continue)
	}
	_ = w.Flush()
	return b.String()
}
