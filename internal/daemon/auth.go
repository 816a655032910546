package daemon

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// scopeRule is how a route treats a scoped token (docs/access.md#scopes). Every route names one, so a
// new route cannot forget that scoped tokens exist.
type scopeRule int

const (
	// fleetWide routes show or change the whole fleet: a scoped token is refused with 403.
	fleetWide scopeRule = iota
	// pathDevice routes act on the {id} device, which must be in the token's scope (else 404).
	pathDevice
	// filtered routes limit what they show or do to the token's scope themselves.
	filtered
)

// The reasons of heartbeatd_api_refused_total: a probe of tokens or a misconfigured client shows there.
const (
	refusedToken     = "token"      // 401: no token, or one the API does not know
	refusedRole      = "role"       // 403: the token's role is below the route's
	refusedScope     = "scope"      // 403 or 404: the route or device is outside the token's scope
	refusedCrossSite = "cross_site" // 403: without tokens, a request from another site or host name
)

// newRefusedCounter counts refused requests by reason, every reason from 0.
func newRefusedCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "api_refused_total",
		Help: "API requests refused by access control: reason token (401), role or scope (403, or 404 for a device a scoped token asks for outside its scope or unknown), cross_site."},
		[]string{"reason"})
	for _, r := range []string{refusedToken, refusedRole, refusedScope, refusedCrossSite} {
		c.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// caller is who a request acts for: a configured token, or, when none is configured, anyone on loopback
// (an admin with no name).
type caller struct {
	Name  string
	Role  config.Role
	Scope config.Scope
}

type callerKey struct{}

// callerOf is the caller guard admitted; an anonymous admin for a handler reached without guard (tests).
func callerOf(r *http.Request) caller {
	if c, ok := r.Context().Value(callerKey{}).(caller); ok {
		return c
	}
	return caller{Role: config.RoleAdmin}
}

// stamp records the caller in an act: its token's name as token, always, and as by when the request named
// no one; so Kafka's act events are an audit trail (docs/access.md#the-audit-trail). Whatever token act
// held is replaced: the request names who acts, never the token that did.
func (c caller) stamp(act event.Act) event.Act {
	act.Token = c.Name
	if act.By == "" {
		act.By = c.Name
	}
	return act
}

// authenticate finds the token r presents. Every configured digest is compared, in constant time, so
// neither the answer's timing nor its position in the list tells a guesser anything. Without configured
// tokens every caller is an anonymous admin (the listener is then loopback only, see config).
func (a *api) authenticate(r *http.Request) (caller, bool) {
	if len(a.Tokens) == 0 {
		return caller{Role: config.RoleAdmin}, true
	}
	got, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		return caller{}, false
	}
	digest := sha256.Sum256([]byte(got))
	var found caller
	match := 0
	for _, t := range a.Tokens {
		if subtle.ConstantTimeCompare(digest[:], t.Digest[:]) == 1 {
			found, match = caller{Name: t.Name, Role: t.Role, Scope: t.Scope}, 1
		}
	}
	return found, match == 1
}

// guard admits a request to rt: 401 without a known token, 403 when the token's role is below the
// route's or its scope cannot use the route, 404 for a device outside its scope. It bounds the body and
// hands the caller to the handler.
func (a *api) guard(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, ok := a.authenticate(r)
		if !ok {
			a.refused.WithLabelValues(refusedToken).Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="heartbeatd"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		if why := a.crossSite(r); why != "" {
			a.refused.WithLabelValues(refusedCrossSite).Inc()
			writeError(w, http.StatusForbidden, why)
			return
		}
		if c.Role < rt.role {
			a.refused.WithLabelValues(refusedRole).Inc()
			writeError(w, http.StatusForbidden, fmt.Sprintf("%s needs the %s role; token %q has %s", rt.pattern, rt.role, c.Name, c.Role))
			return
		}
		if !c.Scope.Whole() && !a.scopeAdmits(w, r, rt, c.Scope) {
			return
		}
		limit := a.MaxBodySize
		switch r.URL.Path {
		case importPath:
			limit = a.MaxImportBytes // streamed a batch at a time (registry.go)
		case signalsPath:
			limit = ingest.MaxBatchBytes // cut into signals as it is read (signals.go)
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		rt.handler(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	}
}

// scopeAdmits applies rt's scope rule for a scoped token; on refusal it has answered.
func (a *api) scopeAdmits(w http.ResponseWriter, r *http.Request, rt route, scope config.Scope) bool {
	switch rt.scope {
	case fleetWide:
		a.refused.WithLabelValues(refusedScope).Inc()
		writeError(w, http.StatusForbidden, fmt.Sprintf("%s covers the whole fleet; this token is scoped to %s", rt.pattern, scope))
		return false
	case pathDevice:
		id := r.PathValue("id")
		in, err := a.inScope(r.Context(), scope, id)
		if err != nil {
			a.internal(w, err)
			return false
		}
		if !in { // the same answer as for a device that does not exist: a scope hides the rest of the fleet
			a.refused.WithLabelValues(refusedScope).Inc()
			writeError(w, http.StatusNotFound, fmt.Sprintf("device %q is not known", id))
			return false
		}
	}
	return true
}

// inScope reports whether device id is known and in scope, by its type or its registered labels.
func (a *api) inScope(ctx context.Context, scope config.Scope, id string) (bool, error) {
	d, found, err := a.Store.Device(ctx, id)
	if err != nil || !found {
		return false, err
	}
	if scope.Type != "" {
		return scope.Matches(d.Type, nil), nil
	}
	labels, err := a.Store.Registry().Labels(ctx, []string{id})
	if err != nil {
		return false, err
	}
	return scope.Matches("", labels[0]), nil
}

// whoami answers the presented token's name, role and scope: the status page shows only the buttons
// they allow, and a script can check its token.
func (a *api) whoami(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r)
	writeJSON(w, http.StatusOK, map[string]string{"name": c.Name, "role": c.Role.String(), "scope": c.Scope.String()})
}

// crossSite says why a request must be refused when no token guards the API ("" = fine). Without a
// token the API listens on loopback only, but a web page in the operator's browser can still reach it:
// a form posted from another site (an ack, a silence), or a page whose name was rebound to 127.0.0.1
// reading it. So the Host must be a loopback name or address, and a browser's request must come from the
// API's own origin (the status page). With a token none of this applies: a browser cannot add it.
func (a *api) crossSite(r *http.Request) string {
	if len(a.Tokens) > 0 {
		return ""
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if ip := net.ParseIP(strings.Trim(host, "[]")); !(host == "localhost" || ip != nil && ip.IsLoopback()) {
		return fmt.Sprintf("host %q: without http.token the API answers only requests to a loopback address", r.Host)
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return "a cross-site browser request: without http.token only the status page's own origin may call the API"
	}
	if origin := r.Header.Get("Origin"); origin != "" && origin != "http://"+r.Host && origin != "https://"+r.Host {
		return fmt.Sprintf("origin %q: without http.token only the status page's own origin may call the API", origin)
	}
	return ""
}

// bearerToken reads "Bearer <token>"; the scheme is case-insensitive (RFC 9110 §11.1).
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	return token, token != ""
}
