package daemon

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// Every distinct (type, own timeout) takes one of the 1024 type indexes; once they are all taken, a
// registration whose own timeout needs a new one is refused with 507 and counted, where it used to be
// stored and timed as the default type without a word. A timeout already in use still registers.
func TestOwnTimeoutRefusedWhenTypeIndexesRunOut(t *testing.T) {
	f := newAPIFixture(t, "")
	ctx := context.Background()
	taken := make([]any, 0, 2*deadline.MaxTypes)
	for i := range deadline.MaxTypes {
		taken = append(taken, fmt.Sprintf("default@%s", time.Duration(1000+i)*time.Second), i) // the names own timeouts take
	}
	taken[0] = deadline.DefaultType
	require.NoError(t, f.rdb.HSet(ctx, f.store.Keys().Types(), taken...).Err())

	code, out := f.call(t, "PUT", "/v1/devices/valve-7", "", `{"timeout": "7s"}`)
	require.Equal(t, http.StatusInsufficientStorage, code, "%v", out)
	assert.Contains(t, out["error"], "type registry is full")
	assert.Equal(t, 1, badInputCount(t, f, badTypesFull))
	code, _ = f.call(t, "GET", "/v1/devices/valve-7", "", "")
	assert.Equal(t, http.StatusNotFound, code, "nothing of the refused registration is stored")

	code, out = f.call(t, "PUT", "/v1/devices/valve-8", "", `{"timeout": "1001s"}`)
	require.Equal(t, http.StatusOK, code, "an own timeout whose index exists: %v", out)

	// In an import, such a row fails alone: the rows around it are written and the answer names its line.
	out = importBody(t, f, "application/x-ndjson", `{"device_id":"meter-1"}
{"device_id":"valve-9","timeout":"9s"}
{"device_id":"meter-2"}
`)
	assert.EqualValues(t, 2, out["imported"], "%v", out)
	assert.EqualValues(t, 1, out["failed"])
	errs, _ := out["errors"].([]any)
	require.Len(t, errs, 1)
	assert.EqualValues(t, 2, errs[0].(map[string]any)["line"])
	assert.Contains(t, errs[0].(map[string]any)["error"], "type registry is full")
	assert.Equal(t, 2, badInputCount(t, f, badTypesFull))
	for dev, want := range map[string]int{"meter-1": http.StatusOK, "valve-9": http.StatusNotFound, "meter-2": http.StatusOK} {
		code, _ = f.call(t, "GET", "/v1/devices/"+dev, "", "")
		assert.Equal(t, want, code, dev)
	}
}
