package event

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// AppendTime writes what the JSON form carries, without the quotes, after whatever b holds.
func TestAppendTime(t *testing.T) {
	for _, tt := range []time.Time{
		time.Date(2026, 11, 22, 10, 0, 30, 12_345_678, time.FixedZone("CET", 3600)),
		time.Date(2026, 11, 22, 10, 0, 30, 0, time.UTC),
		time.Date(2026, 11, 22, 10, 0, 30, 100_000_000, time.UTC),
		time.Date(12026, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		quoted := string(appendWireTime(nil, tt))
		require.Equal(t, "prefix:"+quoted[1:len(quoted)-1], string(AppendTime([]byte("prefix:"), tt)))
	}
	require.Equal(t, "prefix:", string(AppendTime([]byte("prefix:"), time.Time{})))
}
