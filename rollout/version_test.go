package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-feature/go-sdk/openfeature"
	"github.com/open-feature/go-sdk/openfeature/isolated"
	"github.com/open-feature/go-sdk/openfeature/memprovider"
)

// Every version of the flags has a number that only grows, and every
// decision carries the number of the flags it was made from
// (docs/ownership.md section 2). These tests hold each source to it.

func TestStaticVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewStatic(ModeShadow)
	if v := s.Version(); v != 1 {
		t.Fatalf("NewStatic: version %d, want 1", v)
	}
	last := s.Version()
	steps := []struct {
		name    string
		set     func() error
		changes bool
	}{
		{"global mode", func() error { return s.SetMode(ModeMySQL) }, true},
		{"same global mode", func() error { return s.SetMode(ModeMySQL) }, false},
		{"pod mode", func() error { return s.SetPodMode("pod-b", ModeRedis) }, true},
		{"same pod mode", func() error { return s.SetPodMode("pod-b", ModeRedis) }, false},
		{"shop mode", func() error { return s.SetShopMode(7, ModeShadow) }, true},
		{"clear shop mode", func() error { return s.SetShopMode(7, "") }, true},
		{"clear a cleared shop mode", func() error { return s.SetShopMode(7, "") }, false},
		{"global kill", func() error { return s.SetKill(KillRedis) }, true},
		{"pod kill", func() error { return s.SetPodKill("pod-b", KillRedisOnly) }, true},
		{"release pod kill", func() error { return s.SetPodKill("pod-b", KillOff) }, true},
		{"release a released pod kill", func() error { return s.SetPodKill("pod-b", KillOff) }, false},
		{"unknown mode", func() error { return s.SetMode("fast") }, false},
	}
	for _, st := range steps {
		err := st.set()
		v := s.Version()
		switch {
		case st.changes && v != last+1:
			t.Errorf("%s: version %d after %d, want one more", st.name, v, last)
		case !st.changes && v != last:
			t.Errorf("%s: version %d after %d, want it unchanged", st.name, v, last)
		}
		if st.name == "unknown mode" && err == nil {
			t.Error("an unknown mode was accepted")
		}
		last = v
		if d, err := s.Decide(ctx, "pod-b", 7); err != nil || d.Version != v {
			t.Errorf("%s: Decide = %+v, %v; want version %d", st.name, d, err, v)
		}
	}
}

// Versions stay consistent while setters race with Decide: no decision
// carries a version the source never had, and the last one is the count
// of changes.
func TestStaticVersionConcurrent(t *testing.T) {
	t.Parallel()
	s := NewStatic(ModeRedis)
	var wg sync.WaitGroup
	const writers, changes = 4, 100
	for w := range writers {
		wg.Go(func() {
			for i := range changes {
				// Every call changes the state: shop w, alternating modes.
				m := ModeShadow
				if i%2 == 1 {
					m = ModeMySQL
				}
				if err := s.SetShopMode(int64(w+1), m); err != nil {
					t.Error(err)
				}
			}
		})
	}
	var last atomic.Int64
	wg.Go(func() {
		for range 1000 {
			d, _ := s.Decide(context.Background(), "pod-a", 1)
			if d.Version < last.Load() {
				t.Errorf("version went back from %d to %d", last.Load(), d.Version)
			}
			last.Store(d.Version)
		}
	})
	wg.Wait()
	if v := s.Version(); v != 1+writers*changes {
		t.Errorf("version %d after %d changes, want %d", v, writers*changes, 1+writers*changes)
	}
}

// Render writes the version in both flags' metadata as a number, and
// refuses a state without one (version 0) or with a negative one, naming
// the version.
func TestFlagsRenderWritesVersionInBothFlags(t *testing.T) {
	t.Parallel()
	metadata := func(t *testing.T, f *Flags) map[string]map[string]any {
		t.Helper()
		data, err := f.Render()
		must(t, err)
		var doc struct {
			Flags map[string]struct {
				Metadata map[string]any `json:"metadata"`
			} `json:"flags"`
		}
		must(t, json.Unmarshal(data, &doc))
		out := map[string]map[string]any{}
		for k, fl := range doc.Flags {
			out[k] = fl.Metadata
		}
		return out
	}
	for key, meta := range metadata(t, rolloutFlags(t)) {
		if v, ok := meta["version"].(float64); !ok || v != 41 {
			t.Errorf("%s: metadata.version = %#v, want the number 41", key, meta["version"])
		}
	}
	for key, meta := range metadata(t, NewFlags()) {
		if v, ok := meta["version"].(float64); !ok || v != 1 {
			t.Errorf("%s: NewFlags' metadata.version = %#v, want the number 1 (the first version)", key, meta["version"])
		}
	}
	for _, v := range []int64{0, -1} {
		f := NewFlags()
		f.Version = v
		var fe *FlagsError
		if _, err := f.Render(); !errors.As(err, &fe) || fe.Field != "version" {
			t.Errorf("version %d: %v, want a FlagsError naming version", v, err)
		}
	}
	f := NewFlags()
	f.Version = 0
	if _, err := f.Render(); err == nil || !strings.Contains(err.Error(), causeRequired) {
		t.Errorf("version 0: %v, want it saying %q", err, causeRequired)
	}
}

// Update numbers every change: one more than the file's version when the
// state changed (whatever Version the change set), the same version and
// no write when it did not.
func TestFlagsFileUpdateNumbersChanges(t *testing.T) {
	t.Parallel()
	fx := setup(t, rolloutFlags(t), "")
	version := func() int64 {
		t.Helper()
		f, err := fx.file.Read()
		must(t, err)
		return f.Version
	}
	_, after, err := fx.file.Update(func(f *Flags) error { return f.SetMode(Global(), ModeMySQL) })
	must(t, err)
	if after.Version != 42 || version() != 42 {
		t.Errorf("after a change: returned version %d, file %d; want 42", after.Version, version())
	}
	_, after, err = fx.file.Update(func(f *Flags) error {
		f.Version = 7 // ignored: the file decides
		return f.EngageKill(PodScope("pod-b"), KillRedis, Attribution{Actor: "t", Reason: "r"})
	})
	must(t, err)
	if after.Version != 43 || version() != 43 {
		t.Errorf("after a change that set Version 7: returned %d, file %d; want 43", after.Version, version())
	}
	fi1, err := os.Stat(fx.file.Path)
	must(t, err)
	before, after, err := fx.file.Update(func(f *Flags) error { return f.SetMode(Global(), ModeMySQL) })
	must(t, err)
	fi2, err := os.Stat(fx.file.Path)
	must(t, err)
	if before.Version != 43 || after.Version != 43 || !os.SameFile(fi1, fi2) {
		t.Errorf("a change that changes nothing: versions %d -> %d, file replaced %v; want 43 -> 43, untouched",
			before.Version, after.Version, !os.SameFile(fi1, fi2))
	}
	// A missing file starts from version 0: its first change is version 1.
	missing := FlagsFile{Path: fx.file.Path + ".missing"}
	if _, after, err := missing.Update(func(f *Flags) error { return f.SetMode(Global(), ModeShadow) }); err != nil || after.Version != 1 {
		t.Errorf("first change of a missing file: %+v, %v; want version 1", after, err)
	}
}

// FlagSource answers the file's version with every decision, the same one
// Flags.Resolve gives, and follows a rename to a new version.
func TestFlagSourceVersion(t *testing.T) {
	t.Parallel()
	f := rolloutFlags(t)
	fx := setup(t, f, "")
	src := fx.source(t)
	in, out := rampShops(t, 25)
	for _, pod := range []string{"pod-a", "pod-b", "pod-c", "pod-x"} {
		for _, shop := range []int64{in, out, 1001, 1002, 1003} {
			if got, want := decide(t, src, pod, shop), f.Resolve(pod, shop); got != want || got.Version != 41 {
				t.Errorf("Decide(%s, %d) = %+v, want %+v at version 41", pod, shop, got, want)
			}
		}
	}

	// A hand edit, renamed over the file, at the next version.
	next := f.Clone()
	next.Version = 42
	must(t, next.EngageKill(PodScope("pod-a"), KillRedis, Attribution{Actor: "ana", Reason: "drill"}))
	data, err := next.Render()
	must(t, err)
	fx.replace(t, string(data))
	eventually(t, 2*time.Second, "version 42 to apply", func() bool {
		return decide(t, src, "pod-a", in) == next.Resolve("pod-a", in)
	})
	if d := decide(t, src, "pod-a", in); d.Version != 42 || d.Kill != KillRedis {
		t.Errorf("after the rename: %+v, want kill redis at version 42", d)
	}

	// A file without versions is refused: version 42 stays in force.
	fx.replace(t, `{"flags": {}}`)
	eventually(t, 2*time.Second, "the unversioned file to be refused", func() bool {
		_, err := src.Rejected()
		return err != nil
	})
	if d := decide(t, src, "pod-a", in); d != next.Resolve("pod-a", in) {
		t.Errorf("after a file without versions: %+v, want version 42 still in force", d)
	}
}

// The version comes with the variants it was evaluated with: while the
// file flips between two modes, version after version, every decision's
// mode is the one of its version, never a neighbour's.
func TestFlagSourceVersionFollowsTheVariants(t *testing.T) {
	t.Parallel()
	modeOf := func(v int64) Mode { // odd versions shadow, even ones mysql
		if v%2 == 1 {
			return ModeShadow
		}
		return ModeMySQL
	}
	first := NewFlags()
	must(t, first.SetMode(Global(), modeOf(first.Version)))
	fx := setup(t, first, "")
	src := fx.source(t)
	var decisions, mismatches atomic.Int64
	ctx, stop := context.WithCancel(t.Context())
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for ctx.Err() == nil {
				d, err := src.Decide(context.Background(), "pod-a", 1)
				switch {
				case errors.Is(err, ErrVersionMismatch):
					mismatches.Add(1) // torn twice in a row: allowed, never wrong
				case err != nil:
					t.Errorf("Decide: %v", err)
					return
				case d.Mode != modeOf(d.Version):
					t.Errorf("decision %+v: version %d has mode %s", d, d.Version, modeOf(d.Version))
					return
				}
				decisions.Add(1)
			}
		})
	}
	const versions = 30
	for v := int64(2); v <= versions; v++ {
		_, after, err := fx.file.Update(func(f *Flags) error { return f.SetMode(Global(), modeOf(f.Version+1)) })
		must(t, err)
		if after.Version != v {
			t.Fatalf("update %d wrote version %d", v, after.Version)
		}
		eventually(t, 2*time.Second, "the source to reach the new version", func() bool {
			d, err := src.Decide(context.Background(), "pod-a", 1)
			return err == nil && d.Version == v
		})
	}
	stop()
	readers.Wait()
	t.Logf("%d decisions over %d versions, %d refused as torn twice", decisions.Load(), versions, mismatches.Load())
}

// A file whose two flags disagree on the version (or carry one that is not
// a number) is refused like any invalid file: not loaded at start, and
// while running the last valid flags stay.
func TestFlagSourceRefusesDisagreeingVersions(t *testing.T) {
	t.Parallel()
	good := NewFlags()
	good.Version = 4
	must(t, good.SetMode(Global(), ModeShadow))
	data, err := good.Render()
	must(t, err)
	// versions returns the good file with these metadata.version values
	// (nil: no metadata) on the mode flag and the kill switch.
	versions := func(mode, kill any) string {
		var doc map[string]any
		must(t, json.Unmarshal(data, &doc))
		flags := doc["flags"].(map[string]any)
		for key, v := range map[string]any{FlagMode: mode, FlagKillSwitch: kill} {
			fl := flags[key].(map[string]any)
			delete(fl, "metadata")
			if v != nil {
				fl["metadata"] = map[string]any{"version": v}
			}
		}
		out, err := json.Marshal(doc)
		must(t, err)
		return string(out)
	}
	if versions(4, 4) == versions(4, 5) {
		t.Fatal("the edit does not apply")
	}
	bad := map[string]string{
		"versions disagree":   versions(4, 5),
		"version on one flag": versions(4, nil),
		"version as a string": versions("4", "4"),
		"fractional version":  versions(4.5, 4.5),
		"negative version":    versions(-4, -4),
		"version as a bool":   versions(true, true),
	}
	for name, raw := range bad {
		t.Run(name+" at start", func(t *testing.T) {
			t.Parallel()
			fx := setup(t, nil, raw)
			src := fx.source(t)
			notLoaded(t, src)
			if fx.logs.count("metadata.version") == 0 {
				t.Errorf("the log does not name metadata.version:\n%s", fx.logs)
			}
			fx.replace(t, string(data))
			loadsVersion(t, src, ModeShadow, 4)
		})
		t.Run(name+" while running", func(t *testing.T) {
			t.Parallel()
			fx := setup(t, good, "")
			src := fx.source(t)
			fx.replace(t, raw)
			eventually(t, 2*time.Second, "the file to be rejected", func() bool {
				return fx.logs.count("flags file rejected; keeping the last valid flags") > 0
			})
			if d := decide(t, src, "pod-a", 1); d.Mode != ModeShadow || d.Version != 4 {
				t.Errorf("after a rejected file: %+v, want the last valid flags (shadow, version 4)", d)
			}
		})
	}
}

// memSource is a FlagSource over an in-memory provider whose evaluators
// answer (variant, metadata.version) pairs, to drive Decide through cases
// a file cannot produce on demand.
func memSource(t *testing.T, mode, kill func() (string, any)) *FlagSource {
	t.Helper()
	flag := func(key string, answer func() (string, any)) memprovider.InMemoryFlag {
		eval := func(_ memprovider.InMemoryFlag, _ openfeature.FlattenedContext) (any, openfeature.ProviderResolutionDetail) {
			v, version := answer()
			return v, openfeature.ProviderResolutionDetail{Variant: v, Reason: openfeature.TargetingMatchReason,
				FlagMetadata: openfeature.FlagMetadata{"version": version}}
		}
		return memprovider.InMemoryFlag{Key: key, State: memprovider.Enabled, DefaultVariant: "x",
			Variants: map[string]any{"x": "x"}, ContextEvaluator: &eval}
	}
	api := isolated.NewAPI()
	must(t, api.SetProviderAndWait(t.Context(), memprovider.NewInMemoryProvider(map[string]memprovider.InMemoryFlag{
		FlagMode: flag(FlagMode, mode), FlagKillSwitch: flag(FlagKillSwitch, kill),
	})))
	cfg := FlagSourceConfig{Path: "memory", Logger: slog.New(slog.DiscardHandler)}.WithDefaults()
	ff := &fileFeed{}
	ff.loaded.Store(true)
	s := &FlagSource{cfg: cfg, log: cfg.Logger, limiter: newLogLimiter(cfg.LogEvery), feed: ff, api: api, client: api.NewClient()}
	t.Cleanup(func() { must(t, s.Close()) })
	return s
}

func TestFlagSourceDecideVersions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// answers returns each answer in turn, then the last one for good.
	answers := func(list ...[2]any) func() (string, any) {
		var mu sync.Mutex
		return func() (string, any) {
			mu.Lock()
			defer mu.Unlock()
			a := list[0]
			if len(list) > 1 {
				list = list[1:]
			}
			return a[0].(string), a[1]
		}
	}

	t.Run("float64 and int agree", func(t *testing.T) {
		src := memSource(t, answers([2]any{"mysql", 12.0}), answers([2]any{"off", 12}))
		if d, err := src.Decide(ctx, "pod-a", 1); err != nil || d != (Decision{Mode: ModeMySQL, Kill: KillOff, Version: 12}) {
			t.Errorf("got %+v, %v; want mysql, off at version 12", d, err)
		}
	})

	t.Run("no version is 0", func(t *testing.T) {
		src := memSource(t, answers([2]any{"shadow", nil}), answers([2]any{"off", nil}))
		if d, err := src.Decide(ctx, "pod-a", 1); err != nil || d != (Decision{Mode: ModeShadow, Kill: KillOff}) {
			t.Errorf("got %+v, %v; want shadow, off at version 0", d, err)
		}
	})

	t.Run("a torn read is evaluated again", func(t *testing.T) {
		// The file changes between the first two evaluations: mode from
		// version 3, kill switch from version 4; then both from 4.
		src := memSource(t,
			answers([2]any{"mysql", 3.0}, [2]any{"mysql", 4.0}),
			answers([2]any{"redis", 4.0}))
		if d, err := src.Decide(ctx, "pod-a", 1); err != nil || d != (Decision{Mode: ModeMySQL, Kill: KillRedis, Version: 4}) {
			t.Errorf("got %+v, %v; want mysql, redis at version 4", d, err)
		}
	})

	t.Run("torn twice is an error", func(t *testing.T) {
		src := memSource(t, answers([2]any{"mysql", 3.0}, [2]any{"mysql", 5.0}), answers([2]any{"redis", 4.0}, [2]any{"redis", 6.0}))
		if d, err := src.Decide(ctx, "pod-a", 1); d != RedisSafe || !errors.Is(err, ErrVersionMismatch) {
			t.Errorf("got %+v, %v; want RedisSafe, ErrVersionMismatch", d, err)
		}
	})

	for name, v := range map[string]any{"string": "7", "fraction": 7.5, "negative": -1.0, "bool": true} {
		t.Run("version as a "+name, func(t *testing.T) {
			src := memSource(t, answers([2]any{"mysql", v}), answers([2]any{"off", v}))
			if d, err := src.Decide(ctx, "pod-a", 1); d != RedisSafe || err == nil || !strings.Contains(err.Error(), "metadata.version") {
				t.Errorf("got %+v, %v; want RedisSafe and an error naming metadata.version", d, err)
			}
		})
	}
}

func TestVersionOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   any
		want int64
		ok   bool
	}{
		{nil, 0, true}, {0.0, 0, true}, {41.0, 41, true}, {41, 41, true}, {int64(41), 41, true},
		{json.Number("41"), 41, true}, {float64(maxVersion), maxVersion, true},
		{41.5, 0, false}, {-1.0, 0, false}, {-1, 0, false}, {float64(maxVersion) * 2, 0, false},
		{json.Number("4.1"), 0, false}, {"41", 0, false}, {true, 0, false},
	} {
		got, err := versionOf(c.in)
		if got != c.want || (err == nil) != c.ok {
			t.Errorf("versionOf(%#v) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
