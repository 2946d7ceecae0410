package deploy_test

import (
	"debug/buildinfo"
	"errors"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/seed31b0e981/reservoir/internal/testtier"
)

// benchOnly are the modules only `reservoir bench` and the tests need:
// the fault injection (toxiproxy and the HTTP stack it brings), the
// dashboard's browser driver, the linearizability checker. None belongs
// in the serving binary.
var benchOnly = []string{
	"github.com/Shopify/toxiproxy/v2",
	"github.com/gorilla/mux",
	"github.com/rs/zerolog",
	"github.com/chromedp/chromedp",
	"github.com/chromedp/cdproto",
	"github.com/anishathalye/porcupine",
}

// benchPackages are the repository's own packages of the benchmark and
// the fault injection.
var benchPackages = []string{
	"github.com/seed31b0e981/reservoir/internal/bench",
	"github.com/seed31b0e981/reservoir/internal/faults",
}

// checkNoBench reports each module of benchOnly and each package of
// benchPackages that what (a binary or a package list) links.
func checkNoBench(t tb, what string, linked []string) {
	t.Helper()
	if len(linked) < 10 {
		t.Fatalf("%s links only %v: the listing is broken", what, linked)
	}
	for _, m := range slices.Concat(benchOnly, benchPackages) {
		if slices.Contains(linked, m) {
			t.Errorf("%s links %s: the benchmark or its fault injection is in the serving binary (build it with -tags %s, as the Dockerfile does)", what, m, servingTag)
		}
	}
}

// goList returns the packages and the modules ./cmd/reservoir builds
// from, with these build tags.
func goList(t tb, tags []string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-tags", strings.Join(tags, ","),
		"-f", "{{.ImportPath}}{{with .Module}} {{.Path}}{{end}}", "./cmd/reservoir")
	cmd.Dir = thisRepo.root
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var linked []string
	for _, f := range strings.Fields(string(out)) {
		if !slices.Contains(linked, f) {
			linked = append(linked, f)
		}
	}
	return linked
}

// dockerfileTags returns the build tags of the Dockerfile's go build.
func dockerfileTags(t tb) []string {
	t.Helper()
	d := loadDockerfile(t, thisRepo)
	tags := buildTags(strings.Join(d.stages[0].runs, "\n"))
	if !slices.Contains(tags, servingTag) {
		t.Fatalf("the Dockerfile's go build has tags %v, not %s", tags, servingTag)
	}
	return tags
}

// The serving binary, built with the Dockerfile's tags (-tags nobench),
// links neither the benchmark nor its fault injection: `go version -m`
// of it lists no toxiproxy, gorilla/mux, zerolog, chromedp or porcupine,
// and its `reservoir bench` says it has none. Under -short only the
// package graph is checked (go list), not a built binary.
func TestServingBinaryLinksNoBench(t *testing.T) {
	tags := dockerfileTags(t)
	checkNoBench(t, "go list -deps -tags "+strings.Join(tags, ",")+" ./cmd/reservoir", goList(t, tags))

	// The Dockerfile's tags and module graph (-mod=readonly). Its other
	// flags (CGO_ENABLED=0, -trimpath, -ldflags) change no module the
	// binary links, and would make the build compile every package anew
	// (minutes on two cores) where this one reuses what the tests built.
	testtier.Needs(t, "a build of ./cmd/reservoir with the Dockerfile's tags")
	bin := filepath.Join(t.TempDir(), "reservoir")
	build := exec.Command("go", "build", "-mod=readonly", "-tags", strings.Join(tags, ","), "-o", bin, "./cmd/reservoir")
	build.Dir = thisRepo.root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	var modules []string
	for _, d := range info.Deps {
		modules = append(modules, d.Path)
	}
	checkNoBench(t, "go version -m of the serving binary", modules)
	if !slices.ContainsFunc(info.Settings, func(s debug.BuildSetting) bool {
		return s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), servingTag)
	}) {
		t.Errorf("go version -m of the serving binary: built without -tags %s (%v)", servingTag, info.Settings)
	}

	out, err := exec.Command(bin, "bench", "--quick").CombinedOutput()
	var ee *exec.ExitError
	switch {
	case !errors.As(err, &ee) || ee.ExitCode() != 1:
		t.Errorf("reservoir bench in the serving binary: %v, want exit status 1\n%s", err, out)
	case !strings.Contains(string(out), "built without the benchmark"):
		t.Errorf("reservoir bench in the serving binary does not say it has no benchmark:\n%s", out)
	}
}

// The check sees the benchmark in a build without the tag, where `make
// build` puts it (bin/reservoir bench, BENCHMARKS.md).
func TestNoBenchCheckCatchesBench(t *testing.T) {
	rec := &recorder{t: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		checkNoBench(rec, "go list -deps ./cmd/reservoir", goList(rec, nil))
	}()
	<-done
	for _, want := range []string{"links github.com/Shopify/toxiproxy/v2", "links github.com/seed31b0e981/reservoir/internal/bench"} {
		if !slices.ContainsFunc(rec.errors, func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("without -tags %s, no error says %q:\n%s", servingTag, want, strings.Join(rec.errors, "\n"))
		}
	}
	t.Logf("without -tags %s:\n%s", servingTag, strings.Join(rec.errors, "\n"))
}
