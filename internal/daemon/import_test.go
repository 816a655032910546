package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImportAcrossBatches: an import of more rows than three batches imports every good row, names a bad
// one by its line, and a device named twice keeps its later row's labels, also when the two rows fall in
// batches written one after the other (one in flight while the next is read).
func TestImportAcrossBatches(t *testing.T) {
	f := newAPIFixture(t, "")
	const rows = 3*importBatch + 17
	var body strings.Builder
	for i := range rows {
		switch i {
		case 5000:
			body.WriteString(`{"device_id":"bad","labels":{"9x":"y"}}` + "\n")
		case importBatch + 10: // the next batch names device 3 again
			body.WriteString(`{"device_id":"dev-3","labels":{"site":"later"}}` + "\n")
		default:
			fmt.Fprintf(&body, `{"device_id":"dev-%d","labels":{"site":"first"}}`+"\n", i)
		}
	}
	resp, err := http.Post(f.srv.URL+importPath, "application/x-ndjson", strings.NewReader(body.String()))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var res importResult
	require.NoError(t, json.Unmarshal(raw, &res))
	require.Equal(t, rows-1, res.Imported)
	require.Equal(t, 1, res.Failed)
	require.Equal(t, 5001, res.Errors[0].Line)

	ids := []string{"dev-0", "dev-3", "dev-4999", fmt.Sprintf("dev-%d", rows-1), "dev-5000"}
	labels, err := f.store.Registry().Labels(t.Context(), ids)
	require.NoError(t, err)
	require.Equal(t, []map[string]string{{"site": "first"}, {"site": "later"}, {"site": "first"}, {"site": "first"}, nil}, labels)
}
