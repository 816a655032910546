package daemon

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// The reasons of heartbeatd_api_bad_input_total: requests refused for what they carry, as the signal
// sources count theirs in heartbeatd_deadletters_total (docs/operations.md#api-limits).
const (
	// badAct: an act's by or note over its bound or not text, or a request naming the acting token.
	badAct = "act"
	// badID: a device id, parent or type name breaking the id rule (internal/ident): a registration,
	// an import row, a silence.
	badID = "id"
	// badMatcher: a silence with too many matchers, or a regular expression too costly to evaluate.
	badMatcher = "matcher"
	// badImport: an import stopped at a line too long to be a row.
	badImport = "import"
	// badTypesFull: a registration's own timeout needing a type index when all 1024 are taken.
	badTypesFull = "types_full"
)

// newBadInputCounter counts refused input by reason, every reason from 0.
func newBadInputCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "api_bad_input_total",
		Help: "API requests (or import rows) refused for what they carry: act (by or note too long, or naming the token), id (a device id, parent or type name with control or invisible characters, or too long), matcher (a silence matcher too costly), import (a line too long), types_full (a per-device timeout with no type index left)."},
		[]string{"reason"})
	for _, r := range []string{badAct, badID, badMatcher, badImport, badTypesFull} {
		c.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// refuse answers 400 with msg and counts it under reason.
func (a *api) refuse(w http.ResponseWriter, reason, msg string) {
	a.badInput.WithLabelValues(reason).Inc()
	writeError(w, http.StatusBadRequest, msg)
}
