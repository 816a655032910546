package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A device id, parent or type name with an invisible character (Unicode category Cf: a right-to-left
// override, a zero-width space) would show on the status page, in ctl and in Alertmanager as another
// device's (issue 58, 3). Every way in over HTTP refuses it as bad input: registration, import, signals,
// silences; the registry's refusals are counted as heartbeatd_api_bad_input_total{reason="id"}.
func TestInvisibleCharactersInIDsAreRefused(t *testing.T) {
	f := newAPIFixture(t, "")
	spoofs := []string{"meter-1\u202egpj", "meter\u200b-1", "\ufeffmeter-1", "meter-1\u2066", "met\u00ader-1"}
	known := func(id string) bool {
		t.Helper()
		code, _ := f.call(t, "GET", "/v1/devices/"+url.PathEscape(id), "", "")
		return code == http.StatusOK
	}
	refusals := 0
	for _, id := range spoofs {
		code, out := f.call(t, "PUT", "/v1/devices/"+url.PathEscape(id), "", `{}`)
		require.Equal(t, http.StatusBadRequest, code, "PUT %q: %v", id, out)
		assert.Contains(t, out["error"], "must not contain invisible format characters", "PUT %q", id)
		assert.NotContains(t, out["error"], id, "the error quotes the id escaped, never as it would show")
		refusals++
		code, out = f.call(t, "PUT", "/v1/devices/dev-1", "", fmt.Sprintf(`{"parent": %q}`, id))
		require.Equal(t, http.StatusBadRequest, code, "PUT parent %q: %v", id, out)
		assert.Contains(t, out["error"], "parent")
		refusals++
		code, out = f.call(t, "POST", "/v1/devices/"+url.PathEscape(id)+"/signal", "", "")
		require.Equal(t, http.StatusBadRequest, code, "signal %q: %v", id, out)
		assert.Contains(t, out["error"], "invalid_device_id")
		code, out = f.call(t, "POST", "/v1/silences", "", fmt.Sprintf(`{"device_id": %q, "for": "1h"}`, id))
		require.Equal(t, http.StatusBadRequest, code, "silence %q: %v", id, out)
		refusals++
		assert.False(t, known(id), "%q was stored", id)
	}
	code, out := f.call(t, "PUT", "/v1/devices/dev-2", "", `{"device_type": "meter\u202e"}`)
	require.Equal(t, http.StatusBadRequest, code, "%v", out)
	assert.Contains(t, out["error"], "device_type")
	refusals++

	// A batch: the spoofed ids are bad signals, the others stored.
	var batch strings.Builder
	for _, id := range spoofs {
		fmt.Fprintf(&batch, "{\"device_id\": %q}\n", id)
	}
	batch.WriteString(`{"device_id": "plain-1"}` + "\n")
	batch.WriteString(`{"device_id": "plain-2", "parent": "gw\u200d1"}` + "\n")
	batch.WriteString(`{"device_id": "plain-3", "type": "meter\u202e"}` + "\n")
	code, out = f.call(t, "POST", "/v1/signals", "", batch.String())
	require.Equal(t, http.StatusOK, code, "%v", out)
	assert.Equal(t, float64(1), out["accepted"], "%v", out)
	reasons := map[string]int{}
	for _, b := range out["bad"].([]any) {
		reasons[b.(map[string]any)["reason"].(string)]++
	}
	assert.Equal(t, map[string]int{"invalid_device_id": len(spoofs) + 1, "invalid_type": 1}, reasons)

	// Import rows, NDJSON and CSV: each spoofed row fails, named by its line; the others are imported.
	var ndjson, csv strings.Builder
	csv.WriteString("device_id,parent\n")
	for i, id := range spoofs {
		fmt.Fprintf(&ndjson, "{\"device_id\": \"imp-%d\"}\n{\"device_id\": %q}\n", i, id)
		fmt.Fprintf(&csv, "csv-%d,\n%s,\ncsv-p%d,gw\u200b%d\n", i, id, i, i)
	}
	res := importBody(t, f, "application/x-ndjson", ndjson.String())
	assert.Equal(t, float64(len(spoofs)), res["imported"], "%v", res)
	assert.Equal(t, float64(len(spoofs)), res["failed"], "%v", res)
	for i, e := range res["errors"].([]any) {
		assert.Equal(t, float64(2*i+2), e.(map[string]any)["line"], "%v", e)
	}
	refusals += len(spoofs)
	res = importBody(t, f, "text/csv", csv.String())
	assert.Equal(t, float64(len(spoofs)), res["imported"], "%v", res)
	assert.Equal(t, float64(2*len(spoofs)), res["failed"], "%v", res)
	refusals += 2 * len(spoofs)
	for _, id := range spoofs {
		assert.False(t, known(id), "%q was stored", id)
	}
	assert.True(t, known("imp-0") && known("csv-0") && known("plain-1"))
	assert.Equal(t, refusals, badInputCount(t, f, "id"))
}

// importBody posts an import and requires a 200 with its result.
func importBody(t *testing.T, f *apiFixture, contentType, body string) map[string]any {
	t.Helper()
	req, err := http.NewRequest("POST", f.srv.URL+"/v1/devices:import", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%v", out)
	return out
}
