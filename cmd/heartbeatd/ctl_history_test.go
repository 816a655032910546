package main_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An operator reads a device's incidents and the fleet's availability from the terminal: the table and
// -o json show what the server recorded, the ack's author among it.
func TestCtlIncidentsAndAvailability(t *testing.T) {
	f := startCtlFleet(t)
	assert.Contains(t, f.importCSV(t, "m-1,site=berlin\nm-2,site=paris\n"), "imported 2, failed 0")
	require.Eventually(t, func() bool {
		code, out, _ := f.ctl(t, []string{f.viewEnv}, "-o", "json", "incidents", "m-1")
		var page struct{ Incidents []any }
		return code == 0 && json.Unmarshal([]byte(out), &page) == nil && len(page.Incidents) == 1
	}, 30*time.Second, 200*time.Millisecond, "the registered device never signals and is interrupted")
	code, _, errOut := f.ctl(t, nil, "ack", "m-1", "--token-file", f.opsFile)
	require.Equal(t, 0, code, errOut)

	var page struct {
		Incidents []struct {
			FirstKind string `json:"first_kind"`
			Closed    *time.Time
			Acked     *struct{ By string }
		}
	}
	require.Eventually(t, func() bool {
		code, out, _ := f.ctl(t, []string{f.viewEnv}, "-o", "json", "incidents", "m-1")
		return code == 0 && json.Unmarshal([]byte(out), &page) == nil && len(page.Incidents) == 1 && page.Incidents[0].Acked != nil
	}, 10*time.Second, 100*time.Millisecond, "the ack is recorded")
	assert.Equal(t, "interrupted", page.Incidents[0].FirstKind)
	assert.Equal(t, "ops", page.Incidents[0].Acked.By, "acked by the token's name")
	assert.Nil(t, page.Incidents[0].Closed)

	code, out, errOut := f.ctl(t, []string{f.viewEnv}, "incidents", "m-1")
	require.Equal(t, 0, code, errOut)
	assert.True(t, strings.HasPrefix(out, "OPENED "), out)
	assert.Regexp(t, `\sopen\s+\S+\s+interrupted\s+0\s+ops\s`, out)
	assertAligned(t, out)

	code, out, errOut = f.ctl(t, []string{f.viewEnv}, "availability", "--window", "24h", "--group-by", "device_type")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^default\s+2\s+2\s`, out, "both devices, one incident each")
	assertAligned(t, out)
	code, out, errOut = f.ctl(t, []string{f.viewEnv}, "-o", "json", "availability")
	require.Equal(t, 0, code, errOut)
	var fleet struct {
		GroupBy string `json:"group_by"`
		Groups  []struct{ Devices int }
	}
	require.NoError(t, json.Unmarshal([]byte(out), &fleet), out)
	require.Len(t, fleet.Groups, 1)
	assert.Equal(t, 2, fleet.Groups[0].Devices)

	// The berlin token is scoped by a label the server keeps no figures for (history.group_labels): its
	// answer is empty, never the fleet's figures.
	code, out, errOut = f.ctl(t, []string{f.berlinEnv}, "-o", "json", "availability")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &fleet), out)
	assert.Equal(t, "label.site", fleet.GroupBy)
	assert.Empty(t, fleet.Groups)
	code, _, errOut = f.ctl(t, []string{f.viewEnv}, "availability", "--window", "forever")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "window must be")
}
