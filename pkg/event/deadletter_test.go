package event

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// TestDeadLetterBoundsKeyAndPayload: huge input yields a dead letter far below Kafka's 1 MiB default,
// marked as cut, with the original sizes; it survives the round trip.
func TestDeadLetterBoundsKeyAndPayload(t *testing.T) {
	key := bytes.Repeat([]byte("k"), 1<<20)
	d := NewDeadLetter("invalid_device_id", SourceKafka, "device-signals", bytes.Repeat([]byte("p"), 1<<20), time.UnixMilli(0))
	d.SetKey(key)
	key[0] = 'x' // the caller reuses its buffer
	require.Equal(t, bytes.Repeat([]byte("k"), MaxDeadLetterKey), d.Key)
	require.True(t, d.KeyTruncated)
	require.Equal(t, 1<<20, d.KeySize)
	b, err := d.MarshalJSON()
	require.NoError(t, err)
	require.Less(t, len(b)+len(d.Key), 100<<10, "value and key of the dead letter's Kafka message")
	require.Contains(t, string(b), `"key_size":1048576,"key_truncated":true,`)
	got, err := DecodeDeadLetter(b)
	require.NoError(t, err)
	if diff := cmp.Diff(d, got); diff != "" {
		t.Errorf("dead letter round trip (-want +got):\n%s", diff)
	}

	d.SetKey([]byte("dev-7"))
	require.Equal(t, []byte("dev-7"), d.Key)
	require.False(t, d.KeyTruncated)
	require.Zero(t, d.KeySize)
	b, err = d.MarshalJSON()
	require.NoError(t, err)
	require.NotContains(t, string(b), "key_size")
}
