package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// repoRoot is the repository, seen from this package's directory.
const repoRoot = ".."

// docFiles are the pages a user reads: README.md and every Markdown file in docs/.
func docFiles(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, filepath.Join(repoRoot, "README.md"))
	out := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = string(b)
	}
	return out
}

// goSources yields the text of every non-test Go file under the given directories of the repository.
func goSources(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(repoRoot, d), func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			out[p] = string(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

var (
	// A metric registered by its namespace and name, or by its full name (NewDesc, Name: "heartbeatd_…").
	namespacedMetric = regexp.MustCompile(`Namespace:\s*"heartbeatd",\s*Name:\s*"([a-z0-9_]+)"`)
	fullMetric       = regexp.MustCompile(`(?:Name:\s*|NewDesc\(|counter\(|counterVec\()"(heartbeatd_[a-z0-9_]+)"`)
	// A metric named in the docs.
	docMetric = regexp.MustCompile(`\bheartbeatd_[a-z0-9_]*[a-z0-9]`)
	// Histogram series carry a suffix the registered name does not.
	seriesSuffix = regexp.MustCompile(`_(bucket|sum|count)$`)
)

// registeredMetrics are the metric names the code registers.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, src := range goSources(t, "pkg", "internal", "cmd/heartbeatd") {
		for _, m := range namespacedMetric.FindAllStringSubmatch(src, -1) {
			names["heartbeatd_"+m[1]] = true
		}
		for _, m := range fullMetric.FindAllStringSubmatch(src, -1) {
			names[m[1]] = true
		}
	}
	// Fewer than this means the scan above no longer reads the code, not that the metrics went away.
	if len(names) < 30 {
		t.Fatalf("found only %d registered metrics: the patterns no longer match how the code registers them", len(names))
	}
	return names
}

func TestDocsNameOnlyRegisteredMetrics(t *testing.T) {
	registered := registeredMetrics(t)
	var unknown []string
	for file, text := range docFiles(t) {
		for _, name := range docMetric.FindAllString(text, -1) {
			if !registered[name] && !registered[seriesSuffix.ReplaceAllString(name, "")] {
				unknown = append(unknown, file+": "+name)
			}
		}
	}
	failWithAll(t, "the docs name metrics the code does not register", unknown)
}

func TestMetricsPageNamesEveryMetric(t *testing.T) {
	page := docFiles(t)["metrics.md"]
	var missing []string
	for name := range registeredMetrics(t) {
		if !strings.Contains(page, "`"+name+"`") && !strings.Contains(page, "`"+name+"{") {
			missing = append(missing, name)
		}
	}
	failWithAll(t, "docs/metrics.md does not describe", missing)
}

// route is one entry of the API's route table: a method and a path pattern.
type route struct{ method, pattern string }

var (
	routeEntry = regexp.MustCompile(`\{"(GET|HEAD|POST|PUT|PATCH|DELETE) (/[^"]*)",`)
	// A route named in the docs, in backticks: "`GET /v1/devices/{id}`", "`POST /-/reload`".
	docRoute = regexp.MustCompile("`(GET|HEAD|POST|PUT|PATCH|DELETE) (/[^`?\\s]*)")
	wildcard = regexp.MustCompile(`\{[a-z_]+(\.\.\.)?\}`)
)

// routeTable reads the route table of internal/daemon/api.go.
func routeTable(t *testing.T) []route {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "internal", "daemon", "api.go"))
	if err != nil {
		t.Fatal(err)
	}
	var routes []route
	for _, m := range routeEntry.FindAllStringSubmatch(string(b), -1) {
		routes = append(routes, route{m[1], strings.TrimSuffix(m[2], "{$}")})
	}
	if len(routes) < 20 {
		t.Fatalf("found only %d routes in internal/daemon/api.go: the pattern no longer matches the route table", len(routes))
	}
	return routes
}

// matches reports whether path, as the docs write it (a wildcard in braces or a concrete value), is
// served by r.
func (r route) matches(method, path string) bool {
	if method != r.method {
		return false
	}
	var re strings.Builder
	re.WriteString("^")
	last := 0
	for _, loc := range wildcard.FindAllStringIndex(r.pattern, -1) {
		re.WriteString(regexp.QuoteMeta(r.pattern[last:loc[0]]))
		if strings.HasSuffix(r.pattern[loc[0]:loc[1]], "...}") {
			re.WriteString(".+")
		} else {
			re.WriteString("[^/]+")
		}
		last = loc[1]
	}
	re.WriteString(regexp.QuoteMeta(r.pattern[last:]))
	re.WriteString("$")
	return regexp.MustCompile(re.String()).MatchString(path)
}

func TestDocsNameOnlyServedRoutes(t *testing.T) {
	routes := routeTable(t)
	var unknown []string
	for file, text := range docFiles(t) {
		for _, m := range docRoute.FindAllStringSubmatch(text, -1) {
			served := false
			for _, r := range routes {
				served = served || r.matches(m[1], m[2])
			}
			if !served {
				unknown = append(unknown, file+": "+m[1]+" "+m[2])
			}
		}
	}
	failWithAll(t, "the docs name routes the API does not serve", unknown)
}

func TestHTTPAPIPageNamesEveryRoute(t *testing.T) {
	page := docFiles(t)["http-api.md"]
	var missing []string
	for _, r := range routeTable(t) {
		documented := false
		for _, m := range docRoute.FindAllStringSubmatch(page, -1) {
			documented = documented || (m[1] == r.method && wildcard.ReplaceAllString(m[2], "{}") == wildcard.ReplaceAllString(r.pattern, "{}"))
		}
		if !documented {
			missing = append(missing, r.method+" "+r.pattern)
		}
	}
	failWithAll(t, "docs/http-api.md does not list", missing)
}

// The route matching above is what the route tests rely on: a wildcard takes one level, {id...} the rest.
func TestRouteMatching(t *testing.T) {
	device := route{"GET", "/v1/devices/{id}"}
	outage := route{"GET", "/v1/outages/{id...}"}
	for _, c := range []struct {
		r            route
		method, path string
		want         bool
	}{
		{device, "GET", "/v1/devices/{id}", true},
		{device, "GET", "/v1/devices/dev-42", true},
		{device, "POST", "/v1/devices/dev-42", false},
		{device, "GET", "/v1/devices/dev-42/events", false},
		{outage, "GET", "/v1/outages/outage:device_type:meter/1795341630000", true},
		{outage, "GET", "/v1/outages/", false},
	} {
		if got := c.r.matches(c.method, c.path); got != c.want {
			t.Errorf("%s %s against %s: got %v, want %v", c.method, c.path, c.r.pattern, got, c.want)
		}
	}
}

// failWithAll fails t with what it is and the items, one a line, sorted; it passes when there are none.
func failWithAll(t *testing.T, what string, items []string) {
	t.Helper()
	if len(items) > 0 {
		sort.Strings(items)
		t.Errorf("%s:\n%s", what, strings.Join(items, "\n"))
	}
}
