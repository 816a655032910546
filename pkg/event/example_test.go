package event_test

import (
	"fmt"
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// A consumer of the events topic decodes each message value and keys its deduplication on the id.
func ExampleDecode() {
	value := []byte(`{"schema":"heartbeatd.event/v1","id":"dev-42/1795341630000/interrupted/0",` +
		`"kind":"interrupted","device_id":"dev-42","device_type":"gateway",` +
		`"last_seen":"2026-11-22T10:00:00Z","deadline":"2026-11-22T10:00:30Z",` +
		`"at":"2026-11-22T10:00:30.012Z","silent_for_ms":30012,"repeat":0}`)

	e, err := event.Decode(value)
	if err != nil {
		fmt.Println("skip:", err)
		return
	}
	switch e.Kind {
	case event.Interrupted, event.Alarm:
		fmt.Printf("%s (%s) silent for %s since %s, alarm #%d\n", e.DeviceID, e.DeviceType,
			time.Duration(e.SilentForMs)*time.Millisecond, e.LastSeen.Format(time.Kitchen), e.Repeat)
	case event.Recovered:
		fmt.Printf("%s is back\n", e.DeviceID)
	}
	fmt.Println("dedup key:", e.ID)

	_, err = event.Decode([]byte(`{"schema":"other/v9"}`))
	fmt.Println(err)
	// Output:
	// dev-42 (gateway) silent for 30.012s since 10:00AM, alarm #0
	// dedup key: dev-42/1795341630000/interrupted/0
	// event: not a heartbeatd.event/v1 event (schema "other/v9")
}
