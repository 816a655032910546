// Package statuspage is the fleet status page of docs/status-page.md: one hand-written HTML file, its style and
// script inline, embedded in the binary so it works offline and needs no build step. The page holds no
// data: it reads the HTTP API with the token the operator enters (kept in the browser tab's
// sessionStorage), so serving it needs no token. internal/daemon serves Handler at GET /.
package statuspage

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"net/http"
	"sync"
	"time"
)

//go:embed index.html
var page []byte

// served is what every answer carries, computed once from the embedded page.
var served = sync.OnceValue(func() struct{ csp, etag string } {
	style, script := inline(page, "style"), inline(page, "script")
	sum := sha256.Sum256(page)
	return struct{ csp, etag string }{
		// Exactly the page's own style and script (by hash), and requests to its own origin only: an
		// injected script or a framing site gets nothing.
		csp: "default-src 'none'; style-src '" + hash(style) + "'; script-src '" + hash(script) + "'; " +
			"connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
		etag: `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`,
	}
})

// contentSecurityPolicy is the Content-Security-Policy header Handler sends.
func contentSecurityPolicy() string { return served().csp }

// inline returns the content of the page's one <tag> element; the page is ours, so anything else is a
// mistake the package's tests catch.
func inline(html []byte, tag string) []byte {
	open, end := []byte("<"+tag+">"), []byte("</"+tag+">")
	if bytes.Count(html, open) != 1 || bytes.Count(html, end) != 1 {
		panic(fmt.Sprintf("statuspage: index.html must hold exactly one <%s> element", tag))
	}
	_, rest, _ := bytes.Cut(html, open)
	content, _, _ := bytes.Cut(rest, end)
	return content
}

func hash(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// Handler serves the page: revalidated on every load (ETag), never framed, never sniffed.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := served()
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", s.csp)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", s.etag)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(page))
	})
}
