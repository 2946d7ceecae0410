// Package servertest drives the dashboard in a real headless Chromium for
// tests: Debian's chromium package, installed by scripts/chromium (which
// CI runs before the tests), driven with chromedp. It is imported by tests
// only.
package servertest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seed31b0e981/reservoir/internal/testtier"
)

// EnvChromium names a Chromium binary to use instead of asking
// scripts/chromium.
const EnvChromium = "RESERVOIR_CHROMIUM"

// moduleRoot finds the directory holding go.mod, from the test's working
// directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("servertest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Chromium returns the path of a Chromium binary: $RESERVOIR_CHROMIUM, or
// what scripts/chromium prints (it installs Debian's chromium package when
// it is missing and the test runs as root). It fails the test with what to
// run when there is none: a browser test never skips silently (but under
// -short, saying it needs a browser: testtier).
func Chromium(t testing.TB) string {
	t.Helper()
	testtier.Needs(t, "a headless Chromium ("+EnvChromium+" or scripts/chromium)")
	if p := os.Getenv(EnvChromium); p != "" {
		return p
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "chromium"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	path := strings.TrimSpace(string(out))
	if err != nil || path == "" {
		t.Fatalf("no Chromium for the dashboard test: scripts/chromium failed (%v): %s\n"+
			"install it with `scripts/chromium` (Debian's chromium package, as root) or set %s", err, stderr.String(), EnvChromium)
	}
	return path
}

// Browser starts a headless Chromium for the test and returns a chromedp
// context on one tab; the browser is stopped when the test ends. The flags
// are those Chromium needs to run as root in a container without a
// display or a GPU, and a fresh profile directory.
func Browser(t testing.TB, width, height int) context.Context {
	t.Helper()
	exe := Chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// Start the browser now, under the context that lives as long as the
	// test (a timeout on the first run would stop the browser with it).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium %s: %v", exe, err)
	}
	return ctx
}
