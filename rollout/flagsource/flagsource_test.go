package flagsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc/flagdoctest"

	isync "github.com/open-feature/flagd/core/pkg/sync"

	"github.com/seed31b0e981/reservoir/internal/testbuf"
)

// logBuffer collects a source's log lines for assertions.
type logBuffer struct{ testbuf.Buffer }

func (l *logBuffer) count(substr string) int { return strings.Count(l.String(), substr) }

// fixture is one flags file in a temp dir, with the logs of the sources
// started on it.
type fixture struct {
	file flagdoc.FlagsFile
	logs *logBuffer
}

// setup writes f (nil: raw instead) to a fresh flags file.
func setup(t *testing.T, f *flagdoc.Flags, raw string) *fixture {
	t.Helper()
	fx := &fixture{file: flagdoc.FlagsFile{Path: filepath.Join(t.TempDir(), "reservoir.flagd.json")}, logs: &logBuffer{}}
	if f != nil {
		must(t, fx.file.Write(f))
	} else {
		must(t, os.WriteFile(fx.file.Path, []byte(raw), 0o644))
	}
	return fx
}

// source starts a Source on the fixture's file, closed at cleanup.
func (fx *fixture) source(t testing.TB) *Source {
	t.Helper()
	src, err := New(t.Context(), Config{
		Path:         fx.file.Path,
		Logger:       slog.New(slog.NewTextHandler(fx.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		PollInterval: 20 * time.Millisecond,
	})
	must(t, err)
	t.Cleanup(func() {
		if err := src.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return src
}

// replace writes raw bytes over the flags file by rename, the way a
// careful person editing by hand would.
func (fx *fixture) replace(t *testing.T, raw string) {
	t.Helper()
	tmp := fx.file.Path + ".edit"
	must(t, os.WriteFile(tmp, []byte(raw), 0o644))
	must(t, os.Rename(tmp, fx.file.Path))
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func decide(t testing.TB, src *Source, pod string, shop int64) authority.Decision {
	t.Helper()
	d, err := src.Decide(context.Background(), pod, shop)
	if err != nil {
		t.Fatalf("Decide(%s, %d): %v", pod, shop, err)
	}
	return d
}

// (a) Targeting through flagd resolves as documented: the model's Resolve
// is the documentation made executable, and flagd must agree with it for
// every pod and shop, ramps included.
func TestFlagSourceTargeting(t *testing.T) {
	t.Parallel()
	f := flagdoctest.Rollout(t)
	src := setup(t, f, "").source(t)

	in, out := flagdoctest.RampShops(t, 25)
	named := map[string]struct {
		pod  string
		shop int64
		want authority.Decision
	}{
		"global mode":            {"pod-x", 5, authority.Decision{Mode: authority.ModeShadow, Kill: authority.KillOff}},
		"pod mode":               {"pod-a", 5, authority.Decision{Mode: authority.ModeMySQL, Kill: authority.KillOff}},
		"in pod-b's ramp":        {"pod-b", in, authority.Decision{Mode: authority.ModeMySQL, Kill: authority.KillOff}},
		"outside pod-b's ramp":   {"pod-b", out, authority.Decision{Mode: authority.ModeShadow, Kill: authority.KillOff}},
		"shop beats pod":         {"pod-a", 1001, authority.Decision{Mode: authority.ModeMySQLOnly, Kill: authority.KillOff}},
		"shop beats ramp":        {"pod-b", 1002, authority.Decision{Mode: authority.ModeRedis, Kill: authority.KillOff}},
		"pod kill switch":        {"pod-c", 5, authority.Decision{Mode: authority.ModeShadow, Kill: authority.KillRedis}},
		"shop kill switch":       {"pod-a", 1003, authority.Decision{Mode: authority.ModeMySQL, Kill: authority.KillRedisOnly}},
		"strongest switch wins":  {"pod-c", 1003, authority.Decision{Mode: authority.ModeShadow, Kill: authority.KillRedisOnly}},
		"shop switch on any pod": {"pod-x", 1003, authority.Decision{Mode: authority.ModeShadow, Kill: authority.KillRedisOnly}},
	}
	for name, c := range named {
		c.want.Version = f.Version
		if got := decide(t, src, c.pod, c.shop); got != c.want {
			t.Errorf("%s: Decide(%s, %d) = %+v, want %+v", name, c.pod, c.shop, got, c.want)
		}
	}

	inRamp := 0
	for _, pod := range []string{"pod-a", "pod-b", "pod-c", "pod-x"} {
		for shop := int64(1); shop <= 600; shop++ {
			got, want := decide(t, src, pod, shop), f.Resolve(pod, shop)
			if got != want {
				t.Fatalf("Decide(%s, %d) = %+v, the model says %+v", pod, shop, got, want)
			}
			if pod == "pod-b" && got.Mode == authority.ModeMySQL {
				inRamp++
			}
		}
	}
	if inRamp < 100 || inRamp > 200 {
		t.Errorf("%d of pod-b's 600 shops on mysql; want about 25%%", inRamp)
	}

	g := flagdoctest.GlobalKill(t)
	src = setup(t, g, "").source(t)
	for _, shop := range []int64{5, 1001, 1003} {
		if got := decide(t, src, "pod-c", shop); got != g.Resolve("pod-c", shop) || got.Kill != authority.KillRedisOnly {
			t.Errorf("global redis_only: Decide(pod-c, %d) = %+v", shop, got)
		}
	}
}

// (a) A shop stays in its bucket across pods and across restarts, and a
// growing ramp only adds shops.
func TestFlagSourceRampIsSticky(t *testing.T) {
	t.Parallel()
	f := flagdoc.NewFlags()
	must(t, f.SetMode(flagdoc.Global(), authority.ModeShadow))
	must(t, f.SetRamp("pod-b", authority.ModeMySQL, 25))
	must(t, f.SetRamp("pod-d", authority.ModeMySQL, 25))
	fx := setup(t, f, "")
	first := fx.source(t)

	const shops = 400
	before := map[int64]authority.Mode{}
	for shop := int64(1); shop <= shops; shop++ {
		b, d := decide(t, first, "pod-b", shop), decide(t, first, "pod-d", shop)
		if b != d {
			t.Fatalf("shop %d: pod-b says %+v, pod-d says %+v", shop, b, d)
		}
		before[shop] = b.Mode
	}

	restarted := fx.source(t)
	for shop := int64(1); shop <= shops; shop++ {
		if got := decide(t, restarted, "pod-b", shop).Mode; got != before[shop] {
			t.Fatalf("shop %d moved from %s to %s across a restart", shop, before[shop], got)
		}
	}

	_, _, err := fx.file.Update(func(f *flagdoc.Flags) error { return f.SetRamp("pod-b", authority.ModeMySQL, 50) })
	must(t, err)
	eventually(t, 2*time.Second, "the 50% ramp to apply", func() bool {
		n := 0
		for shop := int64(1); shop <= shops; shop++ {
			if decide(t, first, "pod-b", shop).Mode == authority.ModeMySQL {
				n++
			}
		}
		return n > shops*40/100
	})
	for shop := int64(1); shop <= shops; shop++ {
		if before[shop] == authority.ModeMySQL && decide(t, first, "pod-b", shop).Mode != authority.ModeMySQL {
			t.Errorf("shop %d left the ramp when it grew from 25%% to 50%%", shop)
		}
	}
}

// (b) The time from writing the kill switch to every instance obeying it:
// several sources on one file, measured per instance over several rounds.
func TestKillSwitchPropagation(t *testing.T) {
	const instances, rounds = 8, 10
	f := flagdoc.NewFlags()
	must(t, f.SetMode(flagdoc.PodScope("pod-b"), authority.ModeMySQL))
	fx := setup(t, f, "")
	srcs := make([]*Source, instances)
	for i := range srcs {
		srcs[i] = fx.source(t)
	}

	// wait returns, per instance, how long after start it first answered
	// want for pod-b.
	wait := func(start time.Time, want authority.Kill) []time.Duration {
		lat := make([]time.Duration, instances)
		var wg sync.WaitGroup
		for i, src := range srcs {
			wg.Go(func() {
				for {
					d, err := src.Decide(context.Background(), "pod-b", 4242)
					if err == nil && d.Kill == want {
						lat[i] = time.Since(start)
						return
					}
					if time.Since(start) > 5*time.Second {
						lat[i] = -1
						return
					}
					time.Sleep(200 * time.Microsecond)
				}
			})
		}
		wg.Wait()
		return lat
	}

	var engage, release, writes []time.Duration
	for r := range rounds {
		start := time.Now()
		_, _, err := fx.file.Update(func(f *flagdoc.Flags) error {
			return f.EngageKill(flagdoc.PodScope("pod-b"), authority.KillRedis, flagdoc.Attribution{Actor: "test", Reason: "propagation round " + string(rune('0'+r))})
		})
		must(t, err)
		writes = append(writes, time.Since(start))
		engage = append(engage, wait(start, authority.KillRedis)...)
		for _, src := range srcs {
			if d := decide(t, src, "pod-b", 4242); d.Kill != authority.KillRedis || d.Route().Authority != "redis" {
				t.Fatalf("an instance went back on its kill switch: %+v", d)
			}
		}

		start = time.Now()
		_, _, err = fx.file.Update(func(f *flagdoc.Flags) error {
			return f.ReleaseKill(flagdoc.PodScope("pod-b"), flagdoc.Attribution{Actor: "test", Reason: "round over"})
		})
		must(t, err)
		release = append(release, wait(start, authority.KillOff)...)
	}
	if slices.Contains(engage, -1) || slices.Contains(release, -1) {
		t.Fatalf("some instance never obeyed within 5s: engage %v release %v", engage, release)
	}
	med, worst := spread(engage)
	rmed, rworst := spread(release)
	wmed, wworst := spread(writes)
	t.Logf("kill switch propagation, %d instances x %d rounds: engage median %v max %v; release median %v max %v; file write median %v max %v",
		instances, rounds, med, worst, rmed, rworst, wmed, wworst)
	if worst > 2*time.Second || rworst > 2*time.Second {
		t.Errorf("propagation too slow: engage max %v, release max %v (bound 2s)", worst, rworst)
	}
}

func spread(ds []time.Duration) (median, worst time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}

// (g) Bad flags files leave evaluations on the Redis-safe default (or, for
// a running source, on the last valid flags), each with a clear log line.
func TestFlagSourceBadFiles(t *testing.T) {
	t.Parallel()
	mysqlEverywhere := flagdoc.NewFlags()
	must(t, mysqlEverywhere.SetMode(flagdoc.Global(), authority.ModeMySQL))
	good, err := mysqlEverywhere.Render()
	must(t, err)
	modeFlag := func(variants, def string) string {
		return `{"flags": {"reservations.mode": {"state": "ENABLED", "variants": ` + variants + `, "defaultVariant": "` + def + `"}}}`
	}

	// flagd refuses these (an empty file too): at start the source
	// answers RedisSafe with ErrFlagsNotLoaded, and picks the fix up.
	for name, raw := range map[string]string{
		"invalid JSON at start":          `{"flags": {`,
		"empty file at start":            "",
		"only whitespace at start":       "\n\n",
		"default not a variant at start": modeFlag(`{"redis": "redis"}`, "mysql"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fx := setup(t, nil, raw)
			src := fx.source(t)
			for range 20 {
				d, err := src.Decide(t.Context(), "pod-a", 1)
				if d != authority.RedisSafe || !errors.Is(err, ErrFlagsNotLoaded) || src.Loaded() {
					t.Fatalf("got %+v, %v (loaded %v); want RedisSafe, ErrFlagsNotLoaded", d, err, src.Loaded())
				}
			}
			if fx.logs.count("flags file could not be loaded; no decisions until it is fixed") != 1 {
				t.Errorf("want one clear log line:\n%s", fx.logs)
			}
			if fx.logs.count("flags not loaded; no decision until they are") != 1 {
				t.Errorf("want one rate-limited line for the 20 calls:\n%s", fx.logs)
			}
			fx.replace(t, string(good))
			eventually(t, 2*time.Second, "the fixed file to load", func() bool {
				d, err := src.Decide(t.Context(), "pod-a", 1)
				return err == nil && d.Mode == authority.ModeMySQL
			})
		})
	}

	// A file without reservoir's flags has no version (the flags carry
	// it): it is refused like any invalid file, never read as their code
	// defaults, whose decisions could hand no shop off.
	for name, raw := range map[string]string{
		"file with no flags":  `{"flags": {}}`,
		"other flags only":    `{"flags": {"checkout.banner": {"state": "ENABLED", "variants": {"on": true}, "defaultVariant": "on"}}}`,
		"disabled mode flags": `{"flags": {"reservations.mode": {"state": "DISABLED", "variants": {"mysql": "mysql"}, "defaultVariant": "mysql"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fx := setup(t, nil, raw)
			src := fx.source(t)
			notLoaded(t, src)
			if _, err := src.Rejected(); err == nil || !strings.Contains(err.Error(), causeRequired) {
				t.Errorf("Rejected() = %v, want it saying %q", err, causeRequired)
			}
		})
	}

	// A variant reservoir does not know, or one whose value is not its
	// name, is a rejected document (never "redis with the kill switch
	// off"): at start the source loads nothing, and says where the
	// problem is.
	for name, tc := range map[string]struct{ raw, want string }{
		"unknown variant": {modeFlag(`{"redis": "redis", "mysql_fast": "mysql_fast"}`, "mysql_fast"),
			`flags["reservations.mode"].variants["mysql_fast"] (line 1, column 99): unknown variant "mysql_fast"`},
		"variant of the wrong type": {modeFlag(`{"redis": 1, "mysql": 2}`, "mysql"),
			`flags["reservations.mode"].variants["mysql"] (line 1, column 88): value 2 must equal the variant's name "mysql"`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fx := setup(t, nil, tc.raw)
			src := fx.source(t)
			for range 20 {
				if d, err := src.Decide(t.Context(), "pod-a", 1); d != authority.RedisSafe || !errors.Is(err, ErrFlagsNotLoaded) {
					t.Fatalf("got %+v, %v; want RedisSafe, ErrFlagsNotLoaded", d, err)
				}
			}
			at, err := src.Rejected()
			if err == nil || !strings.Contains(err.Error(), tc.want) || at.IsZero() {
				t.Errorf("Rejected() = %v, %v; want an error containing %s", at, err, tc.want)
			}
			if fx.logs.count("flags file could not be loaded; no decisions until it is fixed") != 1 || !strings.Contains(fx.logs.String(), "line 1, column") {
				t.Errorf("want one clear log line with the position:\n%s", fx.logs)
			}
		})
	}

	// flagd rejects these and keeps the last valid flags: a broken edit
	// must not flip a running fleet (a mysql_only scope cannot fall back to
	// Redis safely), and the next valid file applies.
	for name, raw := range map[string]string{
		"invalid JSON while running":    `{"flags": {"reservations.mode": `,
		"default variant not a variant": modeFlag(`{"redis": "redis"}`, "mysql"),
		"truncated write while running": string(good[:len(good)/2]),
		"not an object while running":   `["redis"]`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fx := setup(t, mysqlEverywhere, "")
			src := fx.source(t)
			fx.replace(t, raw)
			eventually(t, 2*time.Second, "a log line for the rejected file", func() bool {
				return fx.logs.count("flags file rejected; keeping the last valid flags") > 0
			})
			if d := decide(t, src, "pod-a", 1); d.Mode != authority.ModeMySQL {
				t.Errorf("after a rejected file: %+v, want the last valid flags (mysql)", d)
			}
			next := flagdoc.NewFlags()
			next.Version = mysqlEverywhere.Version + 1
			must(t, next.SetMode(flagdoc.Global(), authority.ModeShadow))
			must(t, fx.file.Write(next))
			eventually(t, 2*time.Second, "the next valid file to apply", func() bool {
				return decide(t, src, "pod-a", 1).Mode == authority.ModeShadow
			})
		})
	}

}

// Every way of replacing the file applies within milliseconds, including
// the two that lose flagd's own file watch for good (an editor that renames
// the original away, vim's default, and a delete and recreate).
func TestFlagSourceSeesEveryEditStyle(t *testing.T) {
	t.Parallel()
	edits := map[string]func(path string, data []byte) error{
		"rename over": func(path string, data []byte) error {
			if err := os.WriteFile(path+".new", data, 0o644); err != nil {
				return err
			}
			return os.Rename(path+".new", path)
		},
		"editor renames the original away": func(path string, data []byte) error {
			if err := os.Rename(path, path+"~"); err != nil {
				return err
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				return err
			}
			return os.Remove(path + "~")
		},
		"deleted and recreated": func(path string, data []byte) error {
			if err := os.Remove(path); err != nil {
				return err
			}
			time.Sleep(30 * time.Millisecond)
			return os.WriteFile(path, data, 0o644)
		},
		"written in place": func(path string, data []byte) error {
			return os.WriteFile(path, data, 0o644)
		},
	}
	for name, edit := range edits {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fx := setup(t, flagdoc.NewFlags(), "")
			src := fx.source(t)
			for i, mode := range []authority.Mode{authority.ModeShadow, authority.ModeMySQL, authority.ModeShadow} {
				next := flagdoc.NewFlags()
				next.Version = int64(2 + i) // every edit at a higher version
				must(t, next.SetMode(flagdoc.Global(), mode))
				data, err := next.Render()
				must(t, err)
				must(t, edit(fx.file.Path, data))
				eventually(t, time.Second, "the edit to apply to "+string(mode), func() bool {
					d, err := src.Decide(t.Context(), "pod-a", 1)
					return err == nil && d.Mode == mode
				})
			}
			if n := fx.logs.count("rejected"); n > 0 {
				t.Errorf("a transient state of the edit was reported as rejected:\n%s", fx.logs)
			}
		})
	}

	// A Kubernetes ConfigMap volume: the file is a symlink through ..data,
	// and an update swaps ..data to a new directory.
	t.Run("configmap symlink swap", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		version := func(n int, m authority.Mode) {
			f := flagdoc.NewFlags()
			f.Version = int64(n)
			must(t, f.SetMode(flagdoc.Global(), m))
			data, err := f.Render()
			must(t, err)
			v := filepath.Join(dir, "..v"+string(rune('0'+n)))
			must(t, os.Mkdir(v, 0o755))
			must(t, os.WriteFile(filepath.Join(v, "reservoir.flagd.json"), data, 0o644))
			must(t, os.Symlink(filepath.Base(v), filepath.Join(dir, "..data_tmp")))
			must(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
		}
		version(1, authority.ModeShadow)
		must(t, os.Symlink(filepath.Join("..data", "reservoir.flagd.json"), filepath.Join(dir, "reservoir.flagd.json")))
		fx := &fixture{file: flagdoc.FlagsFile{Path: filepath.Join(dir, "reservoir.flagd.json")}, logs: &logBuffer{}}
		src := fx.source(t)
		if d := decide(t, src, "pod-a", 1); d.Mode != authority.ModeShadow {
			t.Fatalf("first version: %+v", d)
		}
		version(2, authority.ModeMySQL)
		eventually(t, time.Second, "the swapped version to apply", func() bool {
			return decide(t, src, "pod-a", 1).Mode == authority.ModeMySQL
		})
		if err := fx.file.Write(flagdoc.NewFlags()); err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("the writer wrote through a ConfigMap symlink: %v", err)
		}
	})
}

func TestFlagSourceConfig(t *testing.T) {
	t.Parallel()
	if _, err := New(t.Context(), Config{}); err == nil || !strings.Contains(err.Error(), "exactly one of Config.Path") {
		t.Errorf("empty config: %v", err)
	}
	if err := (Config{Path: "x", PollInterval: -1}).WithDefaults().Validate(); err == nil {
		t.Error("negative PollInterval accepted")
	}
	c := Config{Path: "x"}.WithDefaults()
	if c.Logger == nil || c.LoadTimeout != 2*time.Second || c.PollInterval != time.Second || c.LogEvery != 10*time.Second {
		t.Errorf("defaults: %+v", c)
	}
}

func TestFlagSourceClose(t *testing.T) {
	t.Parallel()
	fx := setup(t, flagdoc.NewFlags(), "")
	src, err := New(t.Context(), Config{Path: fx.file.Path, Logger: slog.New(slog.NewTextHandler(fx.logs, nil))})
	must(t, err)
	must(t, src.Close())
	must(t, src.Close())
	if d, err := src.Decide(t.Context(), "pod-a", 1); d != authority.RedisSafe || !errors.Is(err, ErrFlagsNotLoaded) {
		t.Errorf("after Close: %+v, %v", d, err)
	}
}

// Several sources in one process are independent: each follows its own
// file.
func TestFlagSourcesAreIndependent(t *testing.T) {
	t.Parallel()
	var srcs []*Source
	for _, m := range authority.Modes {
		f := flagdoc.NewFlags()
		must(t, f.SetMode(flagdoc.Global(), m))
		srcs = append(srcs, setup(t, f, "").source(t))
	}
	for i, src := range srcs {
		if got := decide(t, src, "pod-a", 1).Mode; got != authority.Modes[i] {
			t.Errorf("source %d answers %s, want %s", i, got, authority.Modes[i])
		}
	}
}

// (g) The writer never leaves a half-written file: readers racing 200
// rewrites always read one whole version or the other.
func TestFlagsFileWritesAreAtomic(t *testing.T) {
	t.Parallel()
	small := flagdoc.NewFlags()
	big := flagdoctest.Rollout(t)
	for shop := int64(10_000); shop < 10_600; shop++ {
		must(t, big.SetMode(flagdoc.ShopScope(shop), authority.ModeMySQL))
	}
	// Each rewrite at the next version, as every write must be; the file
	// alternates between the two states.
	const rewrites = 200
	versions := map[string]bool{}
	writes := make([]*flagdoc.Flags, rewrites)
	for i := range writes {
		writes[i] = []*flagdoc.Flags{big, small}[i%2].Clone()
		writes[i].Version = 100 + int64(i)
	}
	for _, f := range append([]*flagdoc.Flags{small}, writes...) {
		data, err := f.Render()
		must(t, err)
		versions[string(data)] = true
	}
	fx := setup(t, small, "")

	ctx, stop := context.WithCancel(t.Context())
	var readers sync.WaitGroup
	var reads sync.Map
	for r := range 4 {
		readers.Go(func() {
			n := 0
			for ctx.Err() == nil {
				data, err := os.ReadFile(fx.file.Path)
				if err != nil {
					t.Errorf("reader %d: %v", r, err)
					return
				}
				if !versions[string(data)] {
					t.Errorf("reader %d saw a partial file (%d bytes)", r, len(data))
					return
				}
				n++
			}
			reads.Store(r, n)
		})
	}
	for _, f := range writes {
		must(t, fx.file.Write(f))
	}
	stop()
	readers.Wait()
	total := 0
	reads.Range(func(_, n any) bool { total += n.(int); return true })
	t.Logf("4 readers read the file %d times during %d rewrites", total, rewrites)

	entries, err := os.ReadDir(filepath.Dir(fx.file.Path))
	must(t, err)
	for _, e := range entries {
		if e.Name() != filepath.Base(fx.file.Path) && e.Name() != filepath.Base(fx.file.Path)+".lock" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

func TestFlagsFileRefusesInvalidState(t *testing.T) {
	t.Parallel()
	fx := setup(t, flagdoctest.Rollout(t), "")
	before, err := os.ReadFile(fx.file.Path)
	must(t, err)

	_, _, err = fx.file.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.PodScope("pod-b"), "mysqll") })
	var fe *flagdoc.FlagsError
	if !errors.As(err, &fe) || fe.Field != `pods["pod-b"].mode` {
		t.Errorf("unknown mode: %v", err)
	}
	_, _, err = fx.file.Update(func(f *flagdoc.Flags) error {
		f.Pods["pod-b"] = flagdoc.PodFlags{Mode: authority.ModeShadow, Ramp: &flagdoc.Ramp{Mode: authority.ModeMySQL, Percent: 0}}
		return nil
	})
	if !errors.As(err, &fe) || fe.Field != `pods["pod-b"].ramp.percent` {
		t.Errorf("bad ramp written straight into the model: %v", err)
	}
	_, _, err = fx.file.Update(func(f *flagdoc.Flags) error {
		return f.EngageKill(flagdoc.Global(), authority.KillRedis, flagdoc.Attribution{Actor: "x"})
	})
	if !errors.As(err, &fe) || fe.Field != "kill.reason" {
		t.Errorf("kill without a reason: %v", err)
	}
	after, err := os.ReadFile(fx.file.Path)
	must(t, err)
	if !bytes.Equal(before, after) {
		t.Error("a refused change modified the file")
	}
}

// Writers serialise on the lock: concurrent read-modify-writes lose
// nothing.
func TestFlagsFileConcurrentUpdates(t *testing.T) {
	t.Parallel()
	fx := setup(t, flagdoc.NewFlags(), "")
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			_, _, err := fx.file.Update(func(f *flagdoc.Flags) error {
				return f.EngageKill(flagdoc.ShopScope(int64(100+i)), authority.KillRedis, flagdoc.Attribution{Actor: "t", Reason: "concurrent"})
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	f, err := fx.file.Read()
	must(t, err)
	if len(f.Shops) != 16 {
		t.Errorf("%d of 16 concurrent kill switches survived", len(f.Shops))
	}
}

// Rewriting the same state does not touch the file (no reload, no event).
func TestFlagsFileSkipsIdenticalWrite(t *testing.T) {
	t.Parallel()
	fx := setup(t, flagdoctest.Rollout(t), "")
	fi1, err := os.Stat(fx.file.Path)
	must(t, err)
	must(t, fx.file.Write(flagdoctest.Rollout(t)))
	before, after, err := fx.file.Update(func(*flagdoc.Flags) error { return nil })
	must(t, err)
	fi2, err := os.Stat(fx.file.Path)
	must(t, err)
	if !os.SameFile(fi1, fi2) || !fi1.ModTime().Equal(fi2.ModTime()) {
		t.Error("an identical write replaced the file")
	}
	if !slices.Equal(slices.Sorted(maps.Keys(before.Pods)), slices.Sorted(maps.Keys(after.Pods))) {
		t.Error("a no-op update changed the state")
	}
}

func BenchmarkFlagSourceDecide(b *testing.B) {
	for name, f := range map[string]*flagdoc.Flags{
		"no-targeting":      flagdoc.NewFlags(),
		"rollout-targeting": flagdoctest.Rollout(b),
	} {
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			file := flagdoc.FlagsFile{Path: filepath.Join(dir, "reservoir.flagd.json")}
			must(b, file.Write(f))
			src, err := New(b.Context(), Config{Path: file.Path, Logger: slog.New(slog.DiscardHandler)})
			must(b, err)
			defer src.Close()
			ctx := context.Background()
			b.ReportAllocs()
			shop := int64(0)
			for b.Loop() {
				shop++
				if _, err := src.Decide(ctx, "pod-b", shop%5000+1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// notLoaded checks that src answers ErrFlagsNotLoaded and is not loaded.
func notLoaded(t *testing.T, src *Source) {
	t.Helper()
	for range 5 {
		d, err := src.Decide(t.Context(), "pod-a", 1)
		if d != authority.RedisSafe || !errors.Is(err, ErrFlagsNotLoaded) || src.Loaded() {
			t.Fatalf("got %+v, %v (loaded %v); want RedisSafe, ErrFlagsNotLoaded, not loaded", d, err, src.Loaded())
		}
	}
}

// loadsVersion waits for src to load and answer mode m at version v.
func loadsVersion(t *testing.T, src *Source, m authority.Mode, v int64) {
	t.Helper()
	loadsWithin(t, src, m, v, 2*time.Second)
}

// loadsWithin is loadsVersion waiting at most within.
func loadsWithin(t *testing.T, src *Source, m authority.Mode, v int64, within time.Duration) {
	t.Helper()
	eventually(t, within, fmt.Sprintf("the file to load (mode %s, version %d)", m, v), func() bool {
		d, err := src.Decide(t.Context(), "pod-a", 1)
		return err == nil && d.Mode == m && d.Version == v && src.Loaded()
	})
}

// A flags file missing when the source starts does not fail it: the source
// starts not loaded and loads the file when it appears, through the
// directory watch (the directory exists) or the poll (it does not yet).
func TestFlagSourceStartsWithoutFile(t *testing.T) {
	t.Parallel()
	want := flagdoc.NewFlags()
	want.Version = 5
	must(t, want.SetMode(flagdoc.Global(), authority.ModeMySQL))
	data, err := want.Render()
	must(t, err)

	for name, under := range map[string]string{
		"file missing":      "",
		"directory missing": "later",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), under)
			fx := &fixture{file: flagdoc.FlagsFile{Path: filepath.Join(dir, "reservoir.flagd.json")}, logs: &logBuffer{}}
			src := fx.source(t)
			notLoaded(t, src)
			if fx.logs.count("flags file cannot be read; no decisions until it can") == 0 {
				t.Errorf("no log line says the file cannot be read:\n%s", fx.logs)
			}
			// Created the documented way: a copy next to it, renamed over.
			must(t, os.MkdirAll(dir, 0o755))
			must(t, os.WriteFile(fx.file.Path+".new", data, 0o644))
			must(t, os.Rename(fx.file.Path+".new", fx.file.Path))
			loadsVersion(t, src, authority.ModeMySQL, 5)

			// Watched from then on: the next change applies too.
			_, _, err := fx.file.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.Global(), authority.ModeShadow) })
			must(t, err)
			loadsVersion(t, src, authority.ModeShadow, 6)
		})
	}
}

// A flags directory replaced by another moved into its place (a deploy
// that swaps the whole directory) is watched again from the next poll:
// later edits apply within moments, not only at each poll. The watch
// followed the old directory away, so the source must watch the path anew.
func TestFlagSourceWatchesADirectoryMovedIntoPlace(t *testing.T) {
	t.Parallel()
	const poll = 4 * time.Second // long, so an edit the watch misses shows, with room for a loaded machine
	base := t.TempDir()
	dir := filepath.Join(base, "flags")
	file := func(dir string) flagdoc.FlagsFile {
		return flagdoc.FlagsFile{Path: filepath.Join(dir, "reservoir.flagd.json")}
	}
	write := func(dir string, m authority.Mode, v int64) {
		t.Helper()
		f := flagdoc.NewFlags()
		f.Version = v
		must(t, f.SetMode(flagdoc.Global(), m))
		must(t, file(dir).Write(f))
	}
	// applies waits for mode m at version v and returns how long it took.
	applies := func(m authority.Mode, v int64, src *Source) time.Duration {
		t.Helper()
		start := time.Now()
		loadsWithin(t, src, m, v, 2*poll+time.Second)
		return time.Since(start)
	}
	must(t, os.Mkdir(dir, 0o755))
	write(dir, authority.ModeShadow, 1)
	logs := &logBuffer{}
	src, err := New(t.Context(), Config{
		Path:         file(dir).Path,
		Logger:       slog.New(slog.NewTextHandler(logs, nil)),
		PollInterval: poll,
	})
	must(t, err)
	t.Cleanup(func() { must(t, src.Close()) })
	loadsWithin(t, src, authority.ModeShadow, 1, time.Second)

	// The swap: the old directory's move is seen, and the read after it
	// finds the new file.
	must(t, os.Mkdir(dir+".new", 0o755))
	write(dir+".new", authority.ModeMySQL, 2)
	must(t, os.Rename(dir, dir+".old"))
	must(t, os.Rename(dir+".new", dir))
	applies(authority.ModeMySQL, 2, src)
	// Nothing watches the new directory until the next poll, which watches
	// it and loads this edit.
	write(dir, authority.ModeShadow, 3)
	applies(authority.ModeShadow, 3, src)

	write(dir, authority.ModeMySQL, 4)
	if took := applies(authority.ModeMySQL, 4, src); took > poll/2 {
		t.Errorf("an edit in the directory moved into place took %v to apply (the poll runs every %v); want it seen by the watch, well under a second\n%s", took, poll, logs)
	}
}

// A flags file that cannot be read when the source starts does not fail
// it either: the source starts not loaded and loads the file once it can
// be read.
func TestFlagSourceStartsUnreadable(t *testing.T) {
	t.Parallel()
	want := flagdoc.NewFlags()
	want.Version = 9
	must(t, want.SetMode(flagdoc.Global(), authority.ModeShadow))
	data, err := want.Render()
	must(t, err)

	// Each case starts from a path whose directory does not exist yet.
	cases := map[string]struct {
		// breakPath makes path unreadable; fix makes it the flags file.
		breakPath, fix func(t *testing.T, path string)
	}{
		// The stat poll must see this one: a chmod changes neither the
		// file's inode, size nor mtime.
		"permissions": {
			breakPath: func(t *testing.T, path string) {
				must(t, os.Mkdir(filepath.Dir(path), 0o755))
				must(t, os.WriteFile(path, data, 0o644))
				must(t, os.Chmod(path, 0))
				if _, err := os.ReadFile(path); err == nil {
					t.Skip("a file with mode 000 is still readable here (running as root?); the other cases make the file unreadable another way")
				}
			},
			fix: func(t *testing.T, path string) { must(t, os.Chmod(path, 0o644)) },
		},
		"a directory at the path": {
			breakPath: func(t *testing.T, path string) { must(t, os.MkdirAll(path, 0o755)) },
			fix: func(t *testing.T, path string) {
				must(t, os.Remove(path))
				must(t, os.WriteFile(path+".new", data, 0o644))
				must(t, os.Rename(path+".new", path))
			},
		},
		"a path through a regular file": {
			breakPath: func(t *testing.T, path string) {
				must(t, os.WriteFile(filepath.Dir(path), []byte("not a directory"), 0o644))
			},
			fix: func(t *testing.T, path string) {
				must(t, os.Remove(filepath.Dir(path)))
				must(t, os.Mkdir(filepath.Dir(path), 0o755))
				must(t, os.WriteFile(path+".new", data, 0o644))
				must(t, os.Rename(path+".new", path))
			},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "flags", "reservoir.flagd.json")
			c.breakPath(t, path)
			if _, err := os.ReadFile(path); err == nil {
				t.Fatal("the path is still readable")
			}
			fx := &fixture{file: flagdoc.FlagsFile{Path: path}, logs: &logBuffer{}}
			src := fx.source(t)
			notLoaded(t, src)
			if fx.logs.count("flags file cannot be read; no decisions until it can") == 0 {
				t.Errorf("no log line says the file cannot be read:\n%s", fx.logs)
			}
			c.fix(t, path)
			loadsVersion(t, src, authority.ModeShadow, 9)
		})
	}
}

// The stat poll alone (no directory watch) loads a file that could not be
// read at start: one created later, and one made readable by a chmod, which
// changes neither its inode, size nor mtime.
func TestFileFeedPollLoadsAFileUnreadableAtStart(t *testing.T) {
	t.Parallel()
	f := flagdoc.NewFlags()
	f.Version = 3
	data, err := f.Render()
	must(t, err)
	for name, c := range map[string]struct {
		breakPath, fix func(t *testing.T, path string)
	}{
		"created later": {
			breakPath: func(*testing.T, string) {},
			fix:       func(t *testing.T, path string) { must(t, os.WriteFile(path, data, 0o644)) },
		},
		"made readable": {
			breakPath: func(t *testing.T, path string) {
				must(t, os.WriteFile(path, data, 0))
				if _, err := os.ReadFile(path); err == nil {
					t.Skip("a file with mode 000 is still readable here (running as root?); TestFlagSourceStartsUnreadable makes a file unreadable other ways")
				}
			},
			fix: func(t *testing.T, path string) { must(t, os.Chmod(path, 0o644)) },
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "reservoir.flagd.json")
			c.breakPath(t, path)
			logs := &logBuffer{}
			log := slog.New(slog.NewTextHandler(logs, nil))
			feed := newFileFeed(path, time.Hour, log, func(_ string, level slog.Level, msg string, args ...any) {
				log.Log(context.Background(), level, msg, args...)
			})
			feed.prime()
			out := make(chan isync.DataSync, 1)
			feed.refresh(t.Context(), out, true)
			if feed.loaded.Load() || len(out) != 0 {
				t.Fatalf("loaded before the fix:\n%s", logs)
			}
			c.fix(t, path)
			feed.refresh(t.Context(), out, true)
			if !feed.loaded.Load() || len(out) != 1 || (<-out).FlagData != string(data) {
				t.Fatalf("the poll did not load the file after the fix:\n%s", logs)
			}
			if logs.count("flags file cannot be read; no decisions until it can") != 2 || logs.count("flags file loaded") != 1 {
				t.Errorf("want one line per failed read and one for the load:\n%s", logs)
			}
		})
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
