package flagsource

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
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc/flagdoctest"
)

// Source answers the file's version with every decision, the same one
// Flags.Resolve gives, and follows a rename to a new version.
func TestFlagSourceVersion(t *testing.T) {
	t.Parallel()
	f := flagdoctest.Rollout(t)
	fx := setup(t, f, "")
	src := fx.source(t)
	in, out := flagdoctest.RampShops(t, 25)
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
	must(t, next.EngageKill(flagdoc.PodScope("pod-a"), authority.KillRedis, flagdoc.Attribution{Actor: "ana", Reason: "drill"}))
	data, err := next.Render()
	must(t, err)
	fx.replace(t, string(data))
	eventually(t, 2*time.Second, "version 42 to apply", func() bool {
		return decide(t, src, "pod-a", in) == next.Resolve("pod-a", in)
	})
	if d := decide(t, src, "pod-a", in); d.Version != 42 || d.Kill != authority.KillRedis {
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
	modeOf := func(v int64) authority.Mode { // odd versions shadow, even ones mysql
		if v%2 == 1 {
			return authority.ModeShadow
		}
		return authority.ModeMySQL
	}
	first := flagdoc.NewFlags()
	must(t, first.SetMode(flagdoc.Global(), modeOf(first.Version)))
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
		_, after, err := fx.file.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.Global(), modeOf(f.Version+1)) })
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
	good := flagdoc.NewFlags()
	good.Version = 4
	must(t, good.SetMode(flagdoc.Global(), authority.ModeShadow))
	data, err := good.Render()
	must(t, err)
	// versions returns the good file with these metadata.version values
	// (nil: no metadata) on the mode flag and the kill switch.
	versions := func(mode, kill any) string {
		var doc map[string]any
		must(t, json.Unmarshal(data, &doc))
		flags := doc["flags"].(map[string]any)
		for key, v := range map[string]any{flagdoc.FlagMode: mode, flagdoc.FlagKillSwitch: kill} {
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
			loadsVersion(t, src, authority.ModeShadow, 4)
		})
		t.Run(name+" while running", func(t *testing.T) {
			t.Parallel()
			fx := setup(t, good, "")
			src := fx.source(t)
			fx.replace(t, raw)
			eventually(t, 2*time.Second, "the file to be rejected", func() bool {
				return fx.logs.count("flags file rejected; keeping the last valid flags") > 0
			})
			if d := decide(t, src, "pod-a", 1); d.Mode != authority.ModeShadow || d.Version != 4 {
				t.Errorf("after a rejected file: %+v, want the last valid flags (shadow, version 4)", d)
			}
		})
	}
}

// memSource is a Source over an in-memory provider whose evaluators
// answer (variant, metadata.version) pairs, to drive Decide through cases
// a file cannot produce on demand.
func memSource(t *testing.T, mode, kill func() (string, any)) *Source {
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
		flagdoc.FlagMode: flag(flagdoc.FlagMode, mode), flagdoc.FlagKillSwitch: flag(flagdoc.FlagKillSwitch, kill),
	})))
	cfg := Config{Path: "memory", Logger: slog.New(slog.DiscardHandler)}.WithDefaults()
	ff := &fileFeed{}
	ff.loaded.Store(true)
	s := &Source{cfg: cfg, log: cfg.Logger, limiter: newLogLimiter(cfg.LogEvery), feed: ff, api: api, client: api.NewClient()}
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
		if d, err := src.Decide(ctx, "pod-a", 1); err != nil || d != (authority.Decision{Mode: authority.ModeMySQL, Kill: authority.KillOff, Version: 12}) {
			t.Errorf("got %+v, %v; want mysql, off at version 12", d, err)
		}
	})

	t.Run("no version is 0", func(t *testing.T) {
		src := memSource(t, answers([2]any{"shadow", nil}), answers([2]any{"off", nil}))
		if d, err := src.Decide(ctx, "pod-a", 1); err != nil || d != (authority.Decision{Mode: authority.ModeShadow, Kill: authority.KillOff}) {
			t.Errorf("got %+v, %v; want shadow, off at version 0", d, err)
		}
	})

	t.Run("a torn read is evaluated again", func(t *testing.T) {
		// The file changes between the first two evaluations: mode from
		// version 3, kill switch from version 4; then both from 4.
		src := memSource(t,
			answers([2]any{"mysql", 3.0}, [2]any{"mysql", 4.0}),
			answers([2]any{"redis", 4.0}))
		if d, err := src.Decide(ctx, "pod-a", 1); err != nil || d != (authority.Decision{Mode: authority.ModeMySQL, Kill: authority.KillRedis, Version: 4}) {
			t.Errorf("got %+v, %v; want mysql, redis at version 4", d, err)
		}
	})

	t.Run("torn twice is an error", func(t *testing.T) {
		src := memSource(t, answers([2]any{"mysql", 3.0}, [2]any{"mysql", 5.0}), answers([2]any{"redis", 4.0}, [2]any{"redis", 6.0}))
		if d, err := src.Decide(ctx, "pod-a", 1); d != authority.RedisSafe || !errors.Is(err, ErrVersionMismatch) {
			t.Errorf("got %+v, %v; want RedisSafe, ErrVersionMismatch", d, err)
		}
	})

	for name, v := range map[string]any{"string": "7", "fraction": 7.5, "negative": -1.0, "bool": true} {
		t.Run("version as a "+name, func(t *testing.T) {
			src := memSource(t, answers([2]any{"mysql", v}), answers([2]any{"off", v}))
			if d, err := src.Decide(ctx, "pod-a", 1); d != authority.RedisSafe || err == nil || !strings.Contains(err.Error(), "metadata.version") {
				t.Errorf("got %+v, %v; want RedisSafe and an error naming metadata.version", d, err)
			}
		})
	}
}

// Update numbers every change: one more than the file's version when the
// state changed (whatever Version the change set), the same version and
// no write when it did not.
func TestFlagsFileUpdateNumbersChanges(t *testing.T) {
	t.Parallel()
	fx := setup(t, flagdoctest.Rollout(t), "")
	version := func() int64 {
		t.Helper()
		f, err := fx.file.Read()
		must(t, err)
		return f.Version
	}
	_, after, err := fx.file.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.Global(), authority.ModeMySQL) })
	must(t, err)
	if after.Version != 42 || version() != 42 {
		t.Errorf("after a change: returned version %d, file %d; want 42", after.Version, version())
	}
	_, after, err = fx.file.Update(func(f *flagdoc.Flags) error {
		f.Version = 7 // ignored: the file decides
		return f.EngageKill(flagdoc.PodScope("pod-b"), authority.KillRedis, flagdoc.Attribution{Actor: "t", Reason: "r"})
	})
	must(t, err)
	if after.Version != 43 || version() != 43 {
		t.Errorf("after a change that set Version 7: returned %d, file %d; want 43", after.Version, version())
	}
	fi1, err := os.Stat(fx.file.Path)
	must(t, err)
	before, after, err := fx.file.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.Global(), authority.ModeMySQL) })
	must(t, err)
	fi2, err := os.Stat(fx.file.Path)
	must(t, err)
	if before.Version != 43 || after.Version != 43 || !os.SameFile(fi1, fi2) {
		t.Errorf("a change that changes nothing: versions %d -> %d, file replaced %v; want 43 -> 43, untouched",
			before.Version, after.Version, !os.SameFile(fi1, fi2))
	}
	// A missing file starts from version 0: its first change is version 1.
	missing := flagdoc.FlagsFile{Path: fx.file.Path + ".missing"}
	if _, after, err := missing.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.Global(), authority.ModeShadow) }); err != nil || after.Version != 1 {
		t.Errorf("first change of a missing file: %+v, %v; want version 1", after, err)
	}
}
