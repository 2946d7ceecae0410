package flagsource

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/ofreptest"
	"github.com/seed31b0e981/reservoir/internal/testcert"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// podFlags renders flags at version v with pod-b in mode m and, when
// kill is not off, pod-b's kill switch at kill.
func podFlags(t *testing.T, m authority.Mode, kill authority.Kill, v int64) string {
	t.Helper()
	f := flagdoc.NewFlags()
	f.Version = v
	must(t, f.SetMode(flagdoc.PodScope("pod-b"), m))
	if kill != authority.KillOff {
		must(t, f.EngageKill(flagdoc.PodScope("pod-b"), kill, flagdoc.Attribution{Reason: "test", Actor: "test"}))
	}
	data, err := f.Render()
	must(t, err)
	return string(data)
}

// ofrepSource starts a Source on an OFREP service, closed at cleanup.
func ofrepSource(t *testing.T, cfg OFREPConfig, logs *logBuffer) *Source {
	t.Helper()
	p, err := NewOFREPProvider(cfg)
	must(t, err)
	src, err := New(t.Context(), Config{Provider: p, LoadTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	must(t, err)
	t.Cleanup(func() {
		if err := src.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return src
}

// A source on an OFREP service decides per pod and shop with the version
// the service answers with both flags, follows a change at the next call,
// and refuses a variant reservoir does not know (the service does not
// check it; the source does, per call).
func TestOFREPFollowsTheService(t *testing.T) {
	t.Parallel()
	svc := ofreptest.New(t, podFlags(t, authority.ModeMySQL, authority.KillOff, 1), ofreptest.WithToken("t0ken-of-the-test"))
	src := ofrepSource(t, OFREPConfig{URL: svc.URL(), Token: "t0ken-of-the-test"}, &logBuffer{})
	if !src.Loaded() {
		t.Fatal("not loaded though the service answers")
	}
	if d := decide(t, src, "pod-b", 1001); d.Mode != authority.ModeMySQL || d.Kill != authority.KillOff || d.Version != 1 {
		t.Errorf("pod-b: %+v; want mysql, kill off, version 1", d)
	}
	if d := decide(t, src, "pod-a", 2002); d.Mode != authority.ModeRedis || d.Version != 1 {
		t.Errorf("pod-a: %+v; want redis at version 1", d)
	}
	if v, ok := src.AppliedVersion(t.Context()); !ok || v != 1 {
		t.Errorf("AppliedVersion = %d, %v; want 1, true", v, ok)
	}

	svc.Set(podFlags(t, authority.ModeMySQL, authority.KillRedis, 2))
	if d := decide(t, src, "pod-b", 1001); d.Kill != authority.KillRedis || d.Route().Authority != reservation.AuthorityRedis || d.Version != 2 {
		t.Errorf("after the kill switch: %+v; want kill redis, Redis deciding, version 2", d)
	}
	if d := decide(t, src, "pod-a", 2002); d.Kill != authority.KillOff || d.Version != 2 {
		t.Errorf("pod-a after pod-b's kill switch: %+v; want kill off at version 2", d)
	}

	// An unknown variant: refused, RedisSafe with an error, per call.
	svc.Set(strings.ReplaceAll(podFlags(t, authority.ModeMySQL, authority.KillOff, 3), `"mysql"`, `"mysqll"`))
	d, err := src.Decide(t.Context(), "pod-b", 1001)
	if !errors.Is(err, ErrUnknownVariant) || d != authority.RedisSafe {
		t.Errorf("an unknown variant from the service: %+v, %v; want RedisSafe and ErrUnknownVariant", d, err)
	}
	// A shop the unknown variant does not reach is still decided.
	if d := decide(t, src, "pod-a", 2002); d.Mode != authority.ModeRedis || d.Version != 3 {
		t.Errorf("pod-a beside an unknown variant: %+v; want redis at version 3", d)
	}
}

// A source whose OFREP service does not answer at start (nothing
// listening, or a wrong token) is not loaded, and is loaded once the
// service answers.
func TestOFREPNotReadyUntilTheServiceAnswers(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	url := "http://" + l.Addr().String()
	must(t, l.Close()) // nothing answers there for now
	logs := &logBuffer{}
	src := ofrepSource(t, OFREPConfig{URL: url, Timeout: 200 * time.Millisecond}, logs)
	if d, err := src.Decide(t.Context(), "pod-b", 1); src.Loaded() || !errors.Is(err, ErrFlagsNotLoaded) || d != authority.RedisSafe {
		t.Fatalf("with no service: %+v, %v (loaded %v); want RedisSafe, ErrFlagsNotLoaded", d, err, src.Loaded())
	}
	l, err = net.Listen("tcp", strings.TrimPrefix(url, "http://"))
	must(t, err)
	ofreptest.New(t, podFlags(t, authority.ModeShadow, authority.KillOff, 4), ofreptest.WithListener(l))
	eventually(t, 10*time.Second, "loaded once the service answers", src.Loaded)
	if d := decide(t, src, "pod-b", 1); d.Mode != authority.ModeShadow || d.Version != 4 {
		t.Errorf("once the service answers: %+v; want shadow at version 4", d)
	}

	// A wrong token is no answer either.
	svc := ofreptest.New(t, podFlags(t, authority.ModeShadow, authority.KillOff, 4), ofreptest.WithToken("the-right-one"))
	wrong := ofrepSource(t, OFREPConfig{URL: svc.URL(), Token: "a-wrong-one", Timeout: 200 * time.Millisecond}, &logBuffer{})
	if wrong.Loaded() {
		t.Error("loaded though the service refuses the token")
	}
}

// Over https the service is verified against CAFile, and one signed by
// another CA is not taken.
func TestOFREPTLS(t *testing.T) {
	t.Parallel()
	certs := testcert.New(t)
	svc := ofreptest.NewTLS(t, podFlags(t, authority.ModeMySQL, authority.KillOff, 7), certs.Server)
	if !strings.HasPrefix(svc.URL(), "https://") {
		t.Fatalf("URL %s", svc.URL())
	}
	src := ofrepSource(t, OFREPConfig{URL: svc.URL(), CAFile: certs.CAFile}, &logBuffer{})
	if d := decide(t, src, "pod-b", 1); d.Mode != authority.ModeMySQL || d.Version != 7 {
		t.Errorf("over TLS: %+v; want mysql at version 7", d)
	}
	other := ofrepSource(t, OFREPConfig{URL: svc.URL(), CAFile: testcert.New(t).CAFile, Timeout: 200 * time.Millisecond}, &logBuffer{})
	if other.Loaded() {
		t.Error("loaded from a service its CA did not sign")
	}
	if _, err := NewOFREPProvider(OFREPConfig{URL: svc.URL(), CAFile: t.TempDir() + "/none.pem"}); err == nil || !strings.Contains(err.Error(), "OFREPConfig.CAFile") {
		t.Errorf("a missing CA file: %v; want an error naming OFREPConfig.CAFile", err)
	}
}

// AppliedVersion, which the heartbeat asks every few milliseconds, asks
// a remote service at most once per VersionEvery; Decide asks at every
// call.
func TestOFREPAppliedVersionIsNotAStorm(t *testing.T) {
	t.Parallel()
	svc := ofreptest.New(t, podFlags(t, authority.ModeMySQL, authority.KillOff, 1))
	src := ofrepSource(t, OFREPConfig{URL: svc.URL()}, &logBuffer{})
	before := svc.Requests()
	start := time.Now()
	for range 200 {
		if v, ok := src.AppliedVersion(t.Context()); !ok || v != 1 {
			t.Fatalf("AppliedVersion = %d, %v; want 1, true", v, ok)
		}
	}
	most := int64(time.Since(start)/(100*time.Millisecond)) + 1
	if n := svc.Requests() - before; n > most {
		t.Errorf("200 AppliedVersion calls in %s sent %d requests; want at most %d (one per 100ms)", time.Since(start), n, most)
	}
	svc.Set(podFlags(t, authority.ModeMySQL, authority.KillOff, 2))
	eventually(t, time.Second, "AppliedVersion follows within VersionEvery", func() bool {
		v, ok := src.AppliedVersion(t.Context())
		return ok && v == 2
	})
	before = svc.Requests()
	decide(t, src, "pod-b", 1)
	if n := svc.Requests() - before; n != 2 {
		t.Errorf("one Decide sent %d requests; want 2 (never cached)", n)
	}
}
