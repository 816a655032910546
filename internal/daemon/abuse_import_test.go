package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// importServer serves f's API and counts the requests whose handler returned.
func importServer(t *testing.T, f *apiFixture) (*httptest.Server, *atomic.Int64, chan struct{}) {
	t.Helper()
	var ended atomic.Int64
	returned := make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			ended.Add(1)
			returned <- struct{}{}
		}()
		f.handler.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		if t.Failed() {
			// A handler that never returns would hold Close for ever: fail instead of hanging (it spins on
			// until the test binary ends).
			srv.CloseClientConnections()
			return
		}
		srv.Close()
	})
	return srv, &ended, returned
}

// postImport posts an import with a client that gives up after 10 s, so a request that is never
// answered fails the test instead of hanging it.
func postImport(t *testing.T, base, contentType, body string) (int, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", base+importPath, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "the import must be answered")
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

// A line longer than a row may be (a JSON array of the rows on one line, say) answers 400 naming the line
// at once (issue 58, 2): before, the scanner's error came back for ever and the import never answered,
// spinning a core. The rows before it are imported, none after it; the import is counted as bad input.
func TestImportLineTooLongAnswers(t *testing.T) {
	f := newAPIFixture(t, "")
	srv, _, _ := importServer(t, f)
	var array strings.Builder
	array.WriteString("[")
	for i := 0; array.Len() <= maxRowBytes; i++ {
		fmt.Fprintf(&array, `{"device_id":"arr-%d"},`, i)
	}
	array.WriteString(`{"device_id":"arr-last"}]`)

	for _, c := range []struct{ contentType, body string }{
		{"application/x-ndjson", "{\"device_id\":\"nd-1\"}\n\n" + array.String() + "\n{\"device_id\":\"nd-2\"}\n"},
		{"text/csv", "device_id,labels\ncsv-1,\ncsv-2,site=" + strings.Repeat("x", maxRowBytes) + "\ncsv-3,\n"},
	} {
		start := time.Now()
		code, out := postImport(t, srv.URL, c.contentType, c.body)
		require.Equal(t, http.StatusBadRequest, code, "%s: %v", c.contentType, out)
		assert.Less(t, time.Since(start), 5*time.Second)
		assert.Contains(t, out["error"], "line 3:", c.contentType)
		assert.Contains(t, out["error"], fmt.Sprint(maxRowBytes), c.contentType)
		assert.Equal(t, float64(3), out["line"], c.contentType)
		assert.Equal(t, float64(1), out["imported"], "%s: the rows before it are imported", c.contentType)
		assert.Equal(t, float64(0), out["failed"], "%s: the line is no failed row, it stopped the import", c.contentType)
	}
	for _, id := range []string{"nd-1", "csv-1"} {
		code, _ := f.call(t, "GET", "/v1/devices/"+id, "", "")
		assert.Equal(t, http.StatusOK, code, "%s: the rows before the line are imported", id)
	}
	for _, id := range []string{"nd-2", "csv-3", "arr-0"} {
		code, _ := f.call(t, "GET", "/v1/devices/"+id, "", "")
		assert.Equal(t, http.StatusNotFound, code, "%s: nothing after the line is read", id)
	}
	assert.Equal(t, 2, badInputCount(t, f, "import"))

	// A JSON array that fits on a line is a bad row, named as such; the rows around it are imported.
	code, out := postImport(t, srv.URL, "application/x-ndjson", "{\"device_id\":\"ok-1\"}\n[{\"device_id\":\"x\"}]\n{\"device_id\":\"ok-2\"}\n")
	require.Equal(t, http.StatusOK, code, "%v", out)
	assert.Equal(t, float64(2), out["imported"])
	assert.Contains(t, fmt.Sprint(out["errors"]), "line:2")
	assert.Contains(t, fmt.Sprint(out["errors"]), "one JSON object per line")
}

// A client that goes away in the middle of its body ends the import (issue 58, 2): the handler returns,
// where before it read the same error for ever on a core of its own, and the next import is served.
func TestImportEndsWhenTheClientGoes(t *testing.T) {
	f := newAPIFixture(t, "")
	srv, ended, returned := importServer(t, f)
	for i, c := range []struct{ contentType, header, row string }{
		{"application/x-ndjson", "", `{"device_id":"gone-%d"}` + "\n"},
		{"text/csv", "device_id\n", "gone-%d\n"},
	} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		require.NoError(t, err)
		var body strings.Builder
		body.WriteString(c.header)
		for j := range 100 {
			fmt.Fprintf(&body, c.row, j)
		}
		// The body announces far more than it sends: the server is still reading it when the client goes.
		_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
			importPath, srv.Listener.Addr(), c.contentType, 10<<20, body.String())
		require.NoError(t, err)
		time.Sleep(100 * time.Millisecond) // the handler is reading
		require.Equal(t, int64(i), ended.Load(), "%s: the handler waits for the rest of the body", c.contentType)
		require.NoError(t, conn.Close())
		select {
		case <-returned:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the import handler did not return after its client went away", c.contentType)
		}
	}
	// The replica serves the next import as ever.
	code, out := postImport(t, srv.URL, "application/x-ndjson", `{"device_id":"after-1"}`+"\n")
	require.Equal(t, http.StatusOK, code, "%v", out)
	assert.Equal(t, float64(1), out["imported"])
}

// A request whose context ends (the server shutting down, a proxy giving up) ends the import between two
// rows, whatever the body still holds: here bad rows, which write nothing to Redis, so no failed write
// would end it either.
func TestImportEndsWithItsRequest(t *testing.T) {
	f := newAPIFixture(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriter(pw)
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, `{"device_id":"ctx-%d","timeout":"never"}`+"\n", i); err != nil {
				return
			}
			if i == 10 {
				_ = w.Flush()
				cancel() // the request ends while its body goes on
			}
		}
	}()
	t.Cleanup(func() { _ = pw.Close() })
	req := httptest.NewRequestWithContext(ctx, "POST", importPath, pr)
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Host = "127.0.0.1" // the API without tokens answers loopback names only
	done := make(chan struct{})
	rec := httptest.NewRecorder()
	go func() {
		defer close(done)
		f.handler.ServeHTTP(rec, req)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the import did not end with its request")
	}
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), "the request ended")
}

// lineLimit counts lines and stops at the first longer than its bound, however the body comes in pieces:
// it hands over the line's first max bytes, then its error naming the line, for good.
func TestLineLimit(t *testing.T) {
	body := "ab\n\nabcd\nabcde\nabcdefgh\nx\n"
	for name, wrap := range map[string]func(io.Reader) io.Reader{
		"whole": func(r io.Reader) io.Reader { return r }, "bytes": iotest.OneByteReader, "halves": iotest.HalfReader,
	} {
		l := &lineLimit{r: wrap(strings.NewReader(body)), max: 5}
		got, err := io.ReadAll(l)
		var long *lineTooLongError
		require.ErrorAs(t, err, &long, name)
		assert.Equal(t, 5, long.line, name)
		assert.Equal(t, "ab\n\nabcd\nabcde\nabcde", string(got), name)
		n, err := l.Read(make([]byte, 8))
		assert.Zero(t, n, name)
		assert.ErrorAs(t, err, &long, name)
	}
	l := &lineLimit{r: strings.NewReader("abcde\nabcde"), max: 5}
	got, err := io.ReadAll(l)
	require.NoError(t, err, "lines at the bound pass")
	assert.Equal(t, "abcde\nabcde", string(got))
}
