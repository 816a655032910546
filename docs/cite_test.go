package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	// A Markdown heading, outside fenced code blocks.
	heading = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$`)
	// What GitHub drops from a heading to make its anchor: everything but letters, digits, '-', '_' and spaces.
	anchorDrop = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)

	// A Go file citing a section by its anchor: "docs/concepts.md#the-incident".
	citedAnchor = regexp.MustCompile(`\bdocs/([a-z0-9-]+)\.md#([A-Za-z0-9_-]+)`)
	// A Go comment citing a section by its name: `docs/concepts.md, "Claim protocol"`,
	// `docs/benchmarks.md ("What limits it")`, `(concepts.md, "Gateways (parents)")`,
	// `docs/scaling.md's "Walks"`.
	citedName = regexp.MustCompile(`\b(?:docs/)?([a-z0-9-]+)\.md(?:'s)?,?\s*\(?"([^"]+)"`)
	// A citation no reader can follow: a page's section by number ("docs/http-api.md, §9"; the pages
	// number no sections, and a number breaks silently when one is added) or a numbered section of a
	// document the repository does not hold, named in capitals right before the §. An RFC or the MQTT
	// standard is cited with its number or version first ("RFC 6455 §5.2"), which stays allowed.
	citedNumber = regexp.MustCompile(`\b(?:(?:docs/)?[a-z0-9-]+\.md|[A-Z][A-Z0-9]+),?\s*\(?§\s*[0-9]`)
	// A link from one page to a section of another or of itself: "(benchmarks.md#results)", "(#roles)".
	linkedAnchor = regexp.MustCompile(`\]\(((?:docs/)?[a-z0-9-]+\.md)?#([^)\s]+)\)`)
)

// anchor is the id GitHub gives a heading: lowercase, punctuation dropped, spaces as '-'.
func anchor(title string) string {
	return strings.ReplaceAll(anchorDrop.ReplaceAllString(strings.ToLower(title), ""), " ", "-")
}

// anchors are the section ids of a Markdown page, duplicates numbered as GitHub numbers them.
func anchors(page string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fenceRE.ReplaceAllString(page, ""), -1) {
		a := anchor(m[1])
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func TestAnchor(t *testing.T) {
	for title, want := range map[string]string{
		"Gateways (parents)":               "gateways-parents",
		"Early warning (`late`)":           "early-warning-late",
		"Blind windows and hold-back":      "blind-windows-and-hold-back",
		"Status page at 1M devices":        "status-page-at-1m-devices",
		"outputs.alertmanager":             "outputsalertmanager",
		"log, shutdown":                    "log-shutdown",
		"Memory per device: 126 B":         "memory-per-device-126-b",
		"Takeover after a replica dies":    "takeover-after-a-replica-dies",
		"HTTP ingest (`POST /v1/signals`)": "http-ingest-post-v1signals",
	} {
		if got := anchor(title); got != want {
			t.Errorf("anchor(%q) = %q, want %q", title, got, want)
		}
	}
	if a := anchors("# A\n## B\n```sh\n# not a heading\n```\n## B\n"); !a["b"] || !a["b-1"] || a["not-a-heading"] {
		t.Errorf("anchors: %v", a)
	}
}

// goComments yields, per Go file of the repository (tests included), its comments with each run of `//`
// lines joined into one line, so a citation wrapped over two lines reads as one.
func goComments(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(repoRoot, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && strings.HasPrefix(e.Name(), ".") && p != repoRoot {
			return filepath.SkipDir
		}
		if e.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var text strings.Builder
		for _, line := range strings.Split(string(b), "\n") {
			if i := strings.Index(line, "//"); i >= 0 {
				text.WriteString(strings.TrimSpace(line[i+2:]) + " ")
			} else {
				text.WriteString("\n")
			}
		}
		rel, _ := filepath.Rel(repoRoot, p)
		out[rel] = text.String()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pageAnchors reads the anchors of docs/<name>.md, or nil when there is no such page.
func pageAnchors(t *testing.T, cache map[string]map[string]bool, name string) map[string]bool {
	t.Helper()
	if a, ok := cache[name]; ok {
		return a
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", name+".md"))
	if err != nil {
		cache[name] = nil
		return nil
	}
	cache[name] = anchors(string(b))
	return cache[name]
}

// TestCodeCitesExistingSections: every section of docs/ a Go comment (or message) cites, by anchor or by
// name, is a heading of that page, so a reader sent there finds it.
func TestCodeCitesExistingSections(t *testing.T) {
	cache := map[string]map[string]bool{}
	var bad []string
	cite := func(file, page, section, as string) {
		a := pageAnchors(t, cache, page)
		switch {
		case a == nil:
			bad = append(bad, file+": docs/"+page+".md does not exist ("+as+")")
		case !a[section]:
			bad = append(bad, file+": docs/"+page+".md has no section "+as)
		}
	}
	n := 0
	for file, comments := range goComments(t) {
		if strings.HasPrefix(file, "docs"+string(filepath.Separator)) {
			continue // this package's tests quote citations as examples
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range citedAnchor.FindAllStringSubmatch(string(b), -1) {
			cite(file, m[1], m[2], "#"+m[2])
			n++
		}
		for _, m := range citedName.FindAllStringSubmatch(comments, -1) {
			cite(file, m[1], anchor(m[2]), `"`+m[2]+`"`)
			n++
		}
		for _, m := range citedNumber.FindAllString(comments, -1) {
			bad = append(bad, file+": "+m+": cite the section by its name or anchor")
		}
	}
	// Fewer than this means the patterns no longer read the citations, not that the code stopped citing.
	if n < 20 {
		t.Fatalf("found only %d citations of docs sections in the code: the patterns no longer match how comments cite", n)
	}
	failWithAll(t, "the code cites sections the docs do not have", bad)
}

// TestDocLinksReachSections: every link of the docs, README.md, CONTRIBUTING.md and CHANGELOG.md to a
// section (page.md#anchor or #anchor) lands on a heading of that page.
func TestDocLinksReachSections(t *testing.T) {
	cache := map[string]map[string]bool{}
	pages := docFiles(t)
	for _, extra := range []string{"CONTRIBUTING.md", "CHANGELOG.md"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, extra))
		if err != nil {
			t.Fatal(err)
		}
		pages[extra] = string(b)
	}
	var bad []string
	for file, text := range pages {
		for _, m := range linkedAnchor.FindAllStringSubmatch(text, -1) {
			var a map[string]bool
			target := strings.TrimPrefix(m[1], "docs/")
			if target == "" {
				a, target = anchors(text), file
			} else {
				a = pageAnchors(t, cache, strings.TrimSuffix(target, ".md"))
			}
			if !a[m[2]] {
				bad = append(bad, file+": "+target+"#"+m[2])
			}
		}
	}
	failWithAll(t, "links to sections that do not exist", bad)
}
