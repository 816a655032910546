package daemon

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// POST /v1/silences takes matchers and time_intervals; what cannot be honoured is a 400 that says why.
func TestAPIRecurringAndMatcherSilences(t *testing.T) {
	f := newAPIFixture(t, "")
	code, created := f.call(t, "POST", "/v1/silences", "",
		`{"matchers":[{"label":"site","op":"=~","value":"ber.*"},{"label":"device_type","op":"=","value":"gateway"}],"for":"1h"}`)
	require.Equal(t, http.StatusCreated, code, created)
	require.Len(t, created["matchers"], 2)

	for bad, want := range map[string]string{
		`{"device_type":"gateway","time_intervals":["night"]}`:                      `time_intervals: "night" is not in the configuration's time_intervals`,
		`{"matchers":[{"label":"site","op":"=~","value":"("}],"for":"1h"}`:          "missing closing )",
		`{"matchers":[{"label":"site","op":"!=","value":"x"}],"for":"1h"}`:          "must not match the empty value",
		`{"matchers":[{"label":"site","op":"~","value":"x"}],"for":"1h"}`:           `op "~" is not one of =, !=, =~, !~`,
		`{"device_type":"gateway"}`:                                                 "until, for or time_intervals is required",
		`{"matchers":[{"label":"site","op":"=","value":"x","extra":1}],"for":"1h"}`: "unknown field",
	} {
		code, body := f.call(t, "POST", "/v1/silences", "", bad)
		require.Equal(t, http.StatusBadRequest, code, bad)
		require.Contains(t, body["error"], want, bad)
	}
}
