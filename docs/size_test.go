package docs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The limits CONTRIBUTING.md sets on size: a file longer than maxFileLines or a package with more than
// maxPackageLines of non-test code has outgrown one purpose and should be split.
const (
	maxFileLines    = 600
	maxPackageLines = 6000
)

func TestFilesAndPackagesAreSmall(t *testing.T) {
	for dir, files := range goPackages(t) {
		total := 0
		for _, f := range files {
			n := lineCount(t, f)
			total += n
			if n > maxFileLines {
				t.Errorf("%s: %d lines, over %d", relPath(f), n, maxFileLines)
			}
		}
		if total > maxPackageLines {
			t.Errorf("%s: %d lines of non-test code, over %d", relPath(dir), total, maxPackageLines)
		}
	}
	// Test files everywhere, those of the test-only packages (test/chaos, deploy, …) included.
	for _, f := range goFiles(t) {
		if !strings.HasSuffix(f, "_test.go") {
			continue // counted above
		}
		if n := lineCount(t, f); n > maxFileLines {
			t.Errorf("%s: %d lines, over %d", relPath(f), n, maxFileLines)
		}
	}
}

func lineCount(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

func relPath(p string) string {
	if r, err := filepath.Rel(repoRoot, p); err == nil {
		return r
	}
	return p
}
