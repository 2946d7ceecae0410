package flagsource

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"

	"github.com/seed31b0e981/reservoir/internal/flagdtest"
)

// flagdDoc renders flags with the global mode m at version v: a document
// as a flagd daemon would stream it.
func flagdDoc(t *testing.T, m authority.Mode, v int64) string {
	t.Helper()
	f := flagdoc.NewFlags()
	f.Version = v
	must(t, f.SetMode(flagdoc.Global(), m))
	data, err := f.Render()
	must(t, err)
	return string(data)
}

// torn is a document at version v whose kill switch says v+1: flagd's
// parser accepts it, so only the feed's own check (checkFlags) keeps it
// out.
func torn(t *testing.T, m authority.Mode, v int64) string {
	t.Helper()
	var doc map[string]any
	must(t, json.Unmarshal([]byte(flagdDoc(t, m, v)), &doc))
	kill := doc["flags"].(map[string]any)[flagdoc.FlagKillSwitch].(map[string]any)
	kill["metadata"] = map[string]any{"version": v + 1}
	out, err := json.Marshal(doc)
	must(t, err)
	return string(out)
}

// flagdSource starts a Source following the daemon at addr, closed at
// cleanup, with its log.
func flagdSource(t *testing.T, addr string) (*Source, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	src, err := New(t.Context(), Config{
		FlagdAddr:   addr,
		Logger:      slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		LoadTimeout: time.Second,
	})
	must(t, err)
	t.Cleanup(func() {
		if err := src.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return src, logs
}

// answers waits (10 s at most: a reconnect backs off up to 2 s) until
// src decides mode m at version v, and returns how long that took.
func answers(t *testing.T, src *Source, m authority.Mode, v int64) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		d, err := src.Decide(t.Context(), "pod-a", 1)
		if err == nil && d.Mode == m && d.Version == v && src.Loaded() {
			return time.Since(start)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("after 10s the source answers %+v, %v (loaded %v); want mode %s at version %d", d, err, src.Loaded(), m, v)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// stillAnswers checks, over many calls, that src keeps deciding mode m at
// version v.
func stillAnswers(t *testing.T, src *Source, m authority.Mode, v int64, why string) {
	t.Helper()
	for range 50 {
		d, err := src.Decide(t.Context(), "pod-a", 1)
		if err != nil || d.Mode != m || d.Version != v {
			t.Fatalf("%s: the source answers %+v, %v; want the last valid flags (mode %s, version %d)", why, d, err, m, v)
		}
	}
}

// logged waits until the log holds n lines containing msg.
func logged(t *testing.T, logs *logBuffer, msg string, n int) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%d log lines %q in:\n%s", n, msg, logs), func() bool { return logs.count(msg) >= n })
}

// A source on a flagd daemon loads the daemon's document at start, applies
// each new version the daemon pushes within moments, refuses a bad
// document (one flagd itself would take included) keeping the last valid
// one, and survives the stream breaking and the daemon restarting.
func TestGRPCFeedFollowsTheDaemon(t *testing.T) {
	t.Parallel()
	srv := flagdtest.New(t, flagdDoc(t, authority.ModeShadow, 1))
	src, logs := flagdSource(t, srv.Addr())

	// Loaded before New returns: the first document is asked
	// for before the provider starts.
	if d := decide(t, src, "pod-a", 1); d.Mode != authority.ModeShadow || d.Version != 1 || !src.Loaded() {
		t.Fatalf("at start the source answers %+v (loaded %v); want shadow at version 1", d, src.Loaded())
	}

	// A new version applies within moments: the daemon pushes it.
	srv.Set(flagdDoc(t, authority.ModeMySQL, 2))
	if took := answers(t, src, authority.ModeMySQL, 2); took > time.Second {
		t.Errorf("version 2 took %v to apply; want well under a second", took)
	} else {
		t.Logf("version 2 applied %v after the daemon had it", took)
	}

	// Bad documents are refused and the last valid one stays.
	const rejected = "flags document from the flagd daemon rejected; keeping the last valid flags"
	srv.Set(torn(t, authority.ModeRedis, 3))
	logged(t, logs, rejected, 1)
	stillAnswers(t, src, authority.ModeMySQL, 2, "after a document whose flags disagree on the version")
	if !strings.Contains(logs.String(), "both flags must carry the same version") {
		t.Errorf("the rejection does not say why:\n%s", logs)
	}
	srv.Set(`{"flags": {`)
	logged(t, logs, rejected, 2)
	stillAnswers(t, src, authority.ModeMySQL, 2, "after invalid JSON")
	if _, err := src.Rejected(); err == nil || !strings.Contains(err.Error(), "(line 1, column 12)") {
		t.Errorf("Rejected() after invalid JSON: %v, want the error with its line and column", err)
	}
	srv.Set(flagdDoc(t, authority.ModeShadow, 3))
	answers(t, src, authority.ModeShadow, 3)
	if _, err := src.Rejected(); err != nil {
		t.Errorf("Rejected() after a valid document loaded: %v", err)
	}

	// The stream breaks: the source keeps its flags and opens a new one.
	const broke = "flagd sync stream broke; keeping the last valid flags"
	srv.Drop()
	logged(t, logs, broke, 1)
	stillAnswers(t, src, authority.ModeShadow, 3, "with the stream broken")
	srv.Set(flagdDoc(t, authority.ModeMySQL, 4)) // reaches the source only on a new stream
	answers(t, src, authority.ModeMySQL, 4)

	// The daemon restarts, with a new version meanwhile.
	srv.Stop()
	logged(t, logs, broke, 2)
	stillAnswers(t, src, authority.ModeMySQL, 4, "with the daemon down")
	srv.Set(flagdDoc(t, authority.ModeMySQLOnly, 5))
	srv.Start()
	answers(t, src, authority.ModeMySQLOnly, 5)
}

// A daemon that goes back to the document in force after serving a bad
// one clears the rejection (reservoir_rollout_flags_rejected, the
// dashboard's banner): the newest document is valid again, though nothing
// new loads. The bad one served again is reported again.
func TestGRPCFeedPutBackClearsTheRejection(t *testing.T) {
	t.Parallel()
	good := flagdDoc(t, authority.ModeShadow, 1)
	srv := flagdtest.New(t, good)
	src, _ := flagdSource(t, srv.Addr())
	answers(t, src, authority.ModeShadow, 1)

	bad := torn(t, authority.ModeRedis, 2)
	srv.Set(bad)
	eventually(t, 10*time.Second, "the torn document to be rejected", func() bool { _, err := src.Rejected(); return err != nil })
	stillAnswers(t, src, authority.ModeShadow, 1, "after the torn document")

	srv.Set(good)
	eventually(t, 10*time.Second, "the rejection to clear once the daemon serves the document in force again", func() bool { _, err := src.Rejected(); return err == nil })
	stillAnswers(t, src, authority.ModeShadow, 1, "after the put back")

	srv.Set(bad)
	eventually(t, 10*time.Second, "the torn document to be rejected again", func() bool { _, err := src.Rejected(); return err != nil })
	stillAnswers(t, src, authority.ModeShadow, 1, "after the torn document again")
}

// A source started while its daemon is down starts anyway, not loaded,
// and loads once the daemon serves.
func TestGRPCFeedStartsWhileTheDaemonIsDown(t *testing.T) {
	t.Parallel()
	srv := flagdtest.New(t, flagdDoc(t, authority.ModeMySQL, 7))
	srv.Stop()
	src, logs := flagdSource(t, srv.Addr())
	notLoaded(t, src)
	// Once at start, then from the stream's first attempt: the source
	// tries again after that.
	logged(t, logs, "flags cannot be read from the flagd daemon; no decisions until they can", 2)
	notLoaded(t, src)
	srv.Start()
	answers(t, src, authority.ModeMySQL, 7)
}

// A daemon whose first document is invalid leaves the source not loaded
// (never on flagd's empty start, which would answer code defaults) until
// it serves a valid one.
func TestGRPCFeedInvalidFirstDocument(t *testing.T) {
	t.Parallel()
	for name, bad := range map[string]string{
		"invalid JSON":        `{"flags": {`,
		"empty":               "",
		"versions disagree":   torn(t, authority.ModeMySQL, 3),
		"default not variant": `{"flags": {"reservations.mode": {"state": "ENABLED", "variants": {"redis": "redis"}, "defaultVariant": "mysql"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := flagdtest.New(t, bad)
			src, logs := flagdSource(t, srv.Addr())
			notLoaded(t, src)
			if logs.count("flags document from the flagd daemon could not be loaded; no decisions until it is fixed") != 1 {
				t.Errorf("want one line saying the document could not be loaded (once, though sent twice):\n%s", logs)
			}
			srv.Set(flagdDoc(t, authority.ModeMySQL, 4))
			answers(t, src, authority.ModeMySQL, 4)
		})
	}
}

func TestFlagSourceConfigFlagd(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"flagd":               "must be host:port",
		":8015":               "must name a host",
		"flagd:http":          `port "http" must be a number`,
		"flagd:0":             `port "0" must be a number from 1 to 65535`,
		"grpc://flagd:8015":   "without a scheme",
		"[::1]:8015":          "",
		"flagd.example:8015":  "",
		"flagd.example:70000": "from 1 to 65535",
	} {
		err := Config{FlagdAddr: addr}.WithDefaults().Validate()
		switch {
		case want == "" && err != nil:
			t.Errorf("FlagdAddr %q refused: %v", addr, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), "Config.FlagdAddr") || !strings.Contains(err.Error(), want)):
			t.Errorf("FlagdAddr %q: %v; want an error naming Config.FlagdAddr and saying %q", addr, err, want)
		}
	}
	err := Config{Path: "x", FlagdAddr: "flagd:8015"}.WithDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), "exactly one of") {
		t.Errorf("a file and a daemon at once: %v", err)
	}
}
