package history

import "sync"

// blobCacheSize bounds the devices whose history a replica remembers: about 100 bytes each, so at most
// a few MB. Past it the cache starts empty again; a device it forgot costs one more round trip.
const blobCacheSize = 1 << 16

// blobCache remembers the history this replica last wrote or read per device, so recording an event
// usually needs no read first: the write's compare (casHistory) checks the remembered value is still
// Redis's, and reads it when not. A device's events mostly come from one replica (its slot's owner), so
// the remembered value is usually right.
type blobCache struct {
	mu    sync.Mutex
	max   int
	blobs map[string]string
}

func newBlobCache(max int) *blobCache { return &blobCache{max: max, blobs: map[string]string{}} }

// get returns each device's remembered history, "" (none) when not remembered.
func (c *blobCache) get(devices []string) []string {
	out := make([]string, len(devices))
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, d := range devices {
		out[i] = c.blobs[d]
	}
	return out
}

func (c *blobCache) put(device, raw string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if raw == "" {
		delete(c.blobs, device)
		return
	}
	if len(c.blobs) >= c.max {
		clear(c.blobs)
	}
	c.blobs[device] = raw
}

func (c *blobCache) drop(devices []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range devices {
		delete(c.blobs, d)
	}
}
