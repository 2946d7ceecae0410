package flagsource_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/open-feature/go-sdk/openfeature/memprovider"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
	"github.com/seed31b0e981/reservoir/rollout/flagsource"
)

// The epoch grows whenever the provider's version or the kill switch
// document's grows, whichever grew and by however much the other did
// not: ordered by the provider's version first, it never goes back when
// a replica sees a provider change and a kill switch change in either
// order. Versions it cannot hold are refused, not wrapped around.
func TestEpochGrowsWithEither(t *testing.T) {
	t.Parallel()
	must := func(p, k int64) int64 {
		t.Helper()
		e, err := flagsource.Epoch(p, k)
		if err != nil {
			t.Fatalf("Epoch(%d, %d): %v", p, k, err)
		}
		return e
	}
	states := [][2]int64{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {1, flagdoc.MaxKillVersion}, {2, 0}, {2, 3}, {flagsource.MaxProviderVersion, 0}, {flagsource.MaxProviderVersion, flagdoc.MaxKillVersion}}
	for i, a := range states {
		for _, b := range states[i+1:] {
			// b is at least a in both versions or later in the provider's:
			// wherever both grew or held, the epoch must not go back.
			if b[0] >= a[0] && b[1] >= a[1] && must(b[0], b[1]) <= must(a[0], a[1]) {
				t.Errorf("Epoch%v = %d is not above Epoch%v = %d", b, must(b[0], b[1]), a, must(a[0], a[1]))
			}
			if b[0] > a[0] && must(b[0], b[1]) <= must(a[0], a[1]) {
				t.Errorf("a newer provider version: Epoch%v = %d is not above Epoch%v = %d", b, must(b[0], b[1]), a, must(a[0], a[1]))
			}
		}
	}
	for _, bad := range [][2]int64{{-1, 0}, {0, -1}, {flagsource.MaxProviderVersion + 1, 0}, {0, flagdoc.MaxKillVersion + 1}} {
		if _, err := flagsource.Epoch(bad[0], bad[1]); !errors.Is(err, flagsource.ErrEpochOverflow) {
			t.Errorf("Epoch%v: %v; want ErrEpochOverflow", bad, err)
		}
	}
}

// A source whose modes come from a provider and whose kill switch is
// reservoir's own (Config.Kills): the provider's mode stands until a
// switch is engaged in the kill switch document, which then wins over
// it; the provider's own switch still counts (the stronger wins); every
// change of either moves the epoch forward, and AppliedVersion (what the
// heartbeat reports) is that epoch.
func TestKillSwitchDocumentWinsOverAProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	provider := memprovider.NewInMemoryProvider(memFlags(7, authority.KillOff))
	src, err := flagsource.New(ctx, flagsource.Config{Provider: provider, Kills: db.DB, VersionEvery: time.Nanosecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	epoch := func(p, k int64) int64 {
		e, err := flagsource.Epoch(p, k)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	want := func(what, pod string, mode authority.Mode, kill authority.Kill, version int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			d, err := src.Decide(ctx, pod, 1001)
			if err == nil && d.Mode == mode && d.Kill == kill && d.Version == version {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s decides %+v, %v; want mode %s, kill %s, version %d", what, pod, d, err, mode, kill, version)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	want("no kill switch document yet", "pod-b", authority.ModeMySQL, authority.KillOff, epoch(7, 0))
	if v, ok := src.AppliedVersion(ctx); !ok || v != epoch(7, 0) {
		t.Errorf("AppliedVersion before any switch: %d, %v; want the epoch of 7 and 0", v, ok)
	}

	store := flagdoc.KillTable{DB: db.DB, Modes: "the in-memory provider"}
	by := flagdoc.Attribution{Actor: "alice", Reason: "pod-b MySQL down"}
	if _, _, err := store.Update(func(f *flagdoc.Flags) error {
		return f.EngageKill(flagdoc.PodScope("pod-b"), authority.KillRedisOnly, by)
	}); err != nil {
		t.Fatal(err)
	}
	want("pod-b killed in the kill switch document", "pod-b", authority.ModeMySQL, authority.KillRedisOnly, epoch(7, 1))
	want("pod-a is not under the switch", "pod-a", authority.ModeRedis, authority.KillOff, epoch(7, 1))
	if v, ok := src.AppliedVersion(ctx); !ok || v != epoch(7, 1) || v&flagdoc.MaxKillVersion != 1 {
		t.Errorf("AppliedVersion after the kill: %d, %v; want the epoch of 7 and 1 (what the heartbeat reports; the controller reads its low bits)", v, ok)
	}

	// The provider engages its own, weaker switch on pod-b and pod-a, at
	// its next version: pod-b keeps the stronger (reservoir's), pod-a takes
	// the provider's.
	provider.UpdateFlags(memFlags(8, authority.KillRedis, "pod-a", "pod-b"))
	want("the stronger switch wins", "pod-b", authority.ModeMySQL, authority.KillRedisOnly, epoch(8, 1))
	want("the provider's own switch counts", "pod-a", authority.ModeRedis, authority.KillRedis, epoch(8, 1))

	if _, _, err := store.Update(func(f *flagdoc.Flags) error { return f.ReleaseKill(flagdoc.PodScope("pod-b"), by) }); err != nil {
		t.Fatal(err)
	}
	want("released: the provider's switch again", "pod-b", authority.ModeMySQL, authority.KillRedis, epoch(8, 2))
	if d, err := src.WithoutKills().Decide(ctx, "pod-b", 1001); err != nil || d.Version != 8 {
		t.Errorf("WithoutKills: %+v, %v; want the provider's own decision at version 8", d, err)
	}
}

// KillTable writes only kill switches: a change that touches a mode is
// refused and writes nothing, naming where the modes are served; a kill
// switch change is written at the next version, from 1; the version is
// bounded by what the epoch holds.
func TestKillTableWritesOnlyKillSwitches(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	store := flagdoc.KillTable{DB: db.DB, Modes: "the flagd daemon at flagd:8015"}
	f, err := store.Read()
	if err != nil || f.Version != 0 || f.Kill.Engaged() {
		t.Fatalf("an empty control database: %+v, %v; want no switch, version 0", f, err)
	}
	by := flagdoc.Attribution{Actor: "bob", Reason: "flash sale"}
	for name, change := range map[string]func(*flagdoc.Flags) error{
		"global mode": func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.Global(), authority.ModeShadow) },
		"pod mode":    func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.PodScope("pod-a"), authority.ModeMySQL) },
		"ramp":        func(f *flagdoc.Flags) error { return f.SetRamp("pod-a", authority.ModeShadow, 10) },
		"kill and mode": func(f *flagdoc.Flags) error {
			if err := f.EngageKill(flagdoc.Global(), authority.KillRedis, by); err != nil {
				return err
			}
			return f.SetMode(flagdoc.ShopScope(9), authority.ModeMySQL)
		},
	} {
		_, _, err := store.Update(change)
		if !errors.Is(err, flagdoc.ErrModesExternal) || !errors.Is(err, flagdoc.ErrFlagsExternal) || !strings.Contains(err.Error(), "the flagd daemon at flagd:8015") {
			t.Errorf("%s: %v; want ErrModesExternal naming the daemon", name, err)
		}
	}
	if f, err := store.Read(); err != nil || f.Version != 0 {
		t.Errorf("after refused changes: version %d, %v; want nothing written", f.Version, err)
	}
	mode := flagdoc.NewFlags()
	if err := mode.SetMode(flagdoc.Global(), authority.ModeMySQL); err != nil {
		t.Fatal(err)
	}
	if err := store.Write(mode); !errors.Is(err, flagdoc.ErrModesExternal) {
		t.Errorf("Write with a mode: %v; want ErrModesExternal", err)
	}
	_, after, err := store.Update(func(f *flagdoc.Flags) error { return f.EngageKill(flagdoc.ShopScope(9), authority.KillRedis, by) })
	if err != nil || after.Version != 1 || after.KillAt(flagdoc.ShopScope(9)).State != authority.KillRedis {
		t.Fatalf("a kill: %+v, %v; want shop 9 killed at version 1", after, err)
	}
	top := flagdoc.NewFlags()
	top.Version = flagdoc.MaxKillVersion + 1
	if err := store.Write(top); err == nil || !strings.Contains(err.Error(), fmt.Sprint(flagdoc.MaxKillVersion)) {
		t.Errorf("a version above the epoch's room: %v", err)
	}
}

// Kills is for the sources whose flags reservoir does not write.
func TestKillsOnlyBesideAnExternalSource(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, cfg := range []flagsource.Config{{Path: "flags.json", Kills: db.DB}, {DB: db.DB, Kills: db.DB}} {
		err := cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), "Config.Kills is for Config.FlagdAddr or Config.Provider") {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}
