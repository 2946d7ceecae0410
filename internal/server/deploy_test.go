package server_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every metric the Grafana board and the alert rules use, and every one
// docs/api.md names, is one the code defines: a renamed or removed metric
// must not leave a blank panel, an alert that can never fire, or a
// documented series nobody exports. (promtool checks the PromQL itself;
// see the rules file.)
func TestDeployFilesUseRealMetrics(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	defined := map[string]bool{}
	literal := regexp.MustCompile(`"(reservoir_[a-z0-9_]+)"`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range literal.FindAllStringSubmatch(string(b), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`reservoir_[a-z0-9_]+`)
	for _, f := range []string{"deploy/grafana/reservoir.json", "deploy/prometheus/alerts.yml", "docs/api.md"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, name := range used.FindAllString(string(b), -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if defined[strings.TrimSuffix(name, suffix)] {
					base = strings.TrimSuffix(name, suffix)
				}
			}
			if !defined[base] {
				t.Errorf("%s uses %s, which no code defines", f, name)
			}
			seen++
		}
		if seen < 10 {
			t.Errorf("%s: only %d metric references found", f, seen)
		}
	}
}

// Every error code the server can answer is in docs/api.md's error table:
// a caller's client maps codes to actions, so an undocumented code is one
// it cannot handle. The codes are the literals the server's code writes
// into problems (and the admin token check's codes).
func TestEveryErrorCodeIsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	row := regexp.MustCompile(`(?m)^\| [0-9]{3} \| (.+?) \|`)
	code := regexp.MustCompile("`([a-z_]+)`")
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		for _, c := range code.FindAllStringSubmatch(m[1], -1) {
			documented[c[1]] = true
		}
	}
	literal := regexp.MustCompile(`(?:Code: +|return )"([a-z_]+)", ?`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range literal.FindAllStringSubmatch(string(b), -1) {
			found++
			if !documented[m[1]] {
				t.Errorf("%s answers error code %q, which docs/api.md's error table does not list", f, m[1])
			}
		}
	}
	if found < 25 {
		t.Fatalf("found only %d error code literals: the pattern no longer matches the code", found)
	}
}
