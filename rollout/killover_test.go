package rollout_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
	"github.com/seed31b0e981/reservoir/rollout/flagsource"
)

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// lastAudit is the newest audit entry.
func lastAudit(t *testing.T, ctl *rollout.Controller) rollout.AuditEntry {
	t.Helper()
	h, err := ctl.History(context.Background(), 1)
	if err != nil || len(h) != 1 {
		t.Fatalf("history: %v %v", h, err)
	}
	return h[0]
}

// Acceptance (d): with an invalid flags file in place, the kill switch
// still works. Kill writes a valid file built from the last valid flags in
// the audit plus the kill, at a version above the broken file's, and
// audits it as such with the broken file as before_flags; the dry run
// shows it and writes nothing; release works the same way.
func TestKillOverAnInvalidFlagsFile(t *testing.T) {
	t.Parallel()
	b := setupController(t, true)
	ctx := context.Background()
	// An audited change: stage 0 (shadow on pod-a), version 2 (the first
	// document is version 1).
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Reason: "start"}); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(b.flags.Path)
	if err != nil {
		t.Fatal(err)
	}
	// A hand edit breaks the file: a missing comma, at version 7.
	broken := strings.Replace(strings.ReplaceAll(string(good), `"version": 2`, `"version": 7`), `"state": "ENABLED",`, `"state": "ENABLED"`, 1)
	if err := os.WriteFile(b.flags.Path, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	// Where it breaks: the key after the missing comma.
	i := strings.Index(broken, `"variants"`)
	where := fmt.Sprintf("(line %d, column %d)", 1+strings.Count(broken[:i], "\n"), i-strings.LastIndex(broken[:i], "\n"))
	_, err = b.flags.Read()
	var bad *flagdoc.InvalidFlagsError
	if !errors.As(err, &bad) || bad.Version != 7 || !strings.Contains(err.Error(), where) {
		t.Fatalf("reading the broken file: %v (%+v); want an InvalidFlagsError at version 7 naming %s", err, bad, where)
	}

	var dry bytes.Buffer
	if err := b.ctl.Kill(ctx, flagdoc.PodScope("pod-b"), authority.KillRedis, rollout.KillOptions{Actor: "bob", Reason: "pod-b p99", DryRun: true, Out: &dry}); err != nil {
		t.Fatalf("dry run over the broken file: %v", err)
	}
	if now, _ := os.ReadFile(b.flags.Path); string(now) != broken {
		t.Fatal("the dry run wrote the file")
	}
	for _, want := range []string{"dry run: would write a valid document at version 8", "\n-       \"state\": \"ENABLED\"\n", "\n+         \"pod:pod-b.reason\": \"pod-b p99\","} {
		if !strings.Contains(dry.String(), want) {
			t.Errorf("the dry run does not show %q:\n%s", want, dry.String())
		}
	}

	var out bytes.Buffer
	if err := b.ctl.Kill(ctx, flagdoc.PodScope("pod-b"), authority.KillRedis, rollout.KillOptions{Actor: "bob", Reason: "pod-b p99", Out: &out}); err != nil {
		t.Fatalf("kill over the broken file: %v", err)
	}
	f, err := b.flags.Read()
	if err != nil {
		t.Fatalf("the file after the kill: %v", err)
	}
	if f.Version != 8 || f.KillAt(flagdoc.PodScope("pod-b")).State != authority.KillRedis || f.Pods["pod-a"].Mode != authority.ModeShadow {
		t.Errorf("after the kill: version %d, pod-b %+v, pod-a mode %q; want version 8, pod-b killed, pod-a still shadow (the audit's flags)",
			f.Version, f.KillAt(flagdoc.PodScope("pod-b")), f.Pods["pod-a"].Mode)
	}
	if !strings.Contains(out.String(), "built from the last valid flags in the audit (entry ") {
		t.Errorf("the kill does not say what it built on:\n%s", out.String())
	}
	written, _ := os.ReadFile(b.flags.Path)
	a := lastAudit(t, b.ctl)
	if a.Action != "kill_over_invalid" || a.Actor != "bob" || a.Scope != "pod:pod-b" || a.Before != broken || a.After != string(written) ||
		!strings.HasPrefix(a.Reason, "pod-b p99 [") || !strings.Contains(a.Reason, where) {
		t.Errorf("audit: %+v", a)
	}

	// Broken again (an unknown variant this time): release works too.
	mysqll := strings.ReplaceAll(strings.Replace(string(written), `"mysql": "mysql"`, `"mysqll": "mysqll"`, 1), `"version": 8`, `"version": 9`)
	if err := os.WriteFile(b.flags.Path, []byte(mysqll), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.ctl.Release(ctx, flagdoc.PodScope("pod-b"), rollout.KillOptions{Actor: "bob", Reason: "p99 back"}); err != nil {
		t.Fatalf("release over the broken file: %v", err)
	}
	if f, err = b.flags.Read(); err != nil || f.Version != 10 || f.KillAt(flagdoc.PodScope("pod-b")).Engaged() || f.Pods["pod-a"].Mode != authority.ModeShadow {
		t.Errorf("after the release: %+v, %v; want version 10, pod-b released, pod-a shadow", f, err)
	}
	if a := lastAudit(t, b.ctl); a.Action != "release_over_invalid" || a.Before != mysqll || !strings.Contains(a.Reason, `variants["mysqll"] (line `) {
		t.Errorf("audit of the release: %+v", a)
	}
}

// The same with the flags in the control database, on real MariaDB, with
// a replica's flag source following it: the broken document is rejected
// (the source keeps the last valid flags and reports it), the kill writes
// a valid one at a version above the broken row's, and the source loads
// it and clears the rejection.
func TestKillOverAnInvalidDatabaseDocument(t *testing.T) {
	t.Parallel()
	b := setupController(t, true)
	ctx := context.Background()
	table := flagdoc.FlagsTable{DB: b.db.DB}
	ctl := b.controller(t, func(c *rollout.ControllerConfig) { c.Flags = table })
	if err := table.Write(flagdoc.NewFlags()); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, rollout.KillOptions{Actor: "ana", Reason: "pod-a first"}); err != nil {
		t.Fatal(err)
	}
	src, err := flagsource.New(ctx, flagsource.Config{DB: b.db.DB, PollInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	decision := func(pod string) authority.Decision {
		d, err := src.Decide(ctx, pod, 1)
		if err != nil {
			t.Fatalf("decide %s: %v", pod, err)
		}
		return d
	}
	if d := decision("pod-a"); d.Kill != authority.KillRedis || d.Version != 2 {
		t.Fatalf("at start: %+v", d)
	}

	// A hand edit in the database: an unknown variant, at row version 3.
	var doc string
	if err := b.db.DB.QueryRow(`SELECT document FROM rollout_flags WHERE id = 1`).Scan(&doc); err != nil {
		t.Fatal(err)
	}
	bad := strings.ReplaceAll(strings.Replace(doc, `"mysql": "mysql"`, `"mysqll": "mysqll"`, 1), `"version": 2`, `"version": 3`)
	if _, err := b.db.DB.Exec(`UPDATE rollout_flags SET version = 3, document = ? WHERE id = 1`, bad); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "the source to reject the document", func() bool { _, err := src.Rejected(); return err != nil })
	if _, err := src.Rejected(); !strings.Contains(err.Error(), `flags["reservations.mode"].variants["mysqll"] (line `) {
		t.Errorf("the rejection does not say where: %v", err)
	}
	if d := decision("pod-a"); d.Kill != authority.KillRedis || d.Version != 2 {
		t.Errorf("after the rejected document: %+v, want the last valid flags", d)
	}

	if err := ctl.Kill(ctx, flagdoc.PodScope("pod-b"), authority.KillRedisOnly, rollout.KillOptions{Actor: "bob", Reason: "pod-b MySQL down"}); err != nil {
		t.Fatalf("kill over the broken document: %v", err)
	}
	waitFor(t, 2*time.Second, "the source to load the kill", func() bool { return decision("pod-b").Kill == authority.KillRedisOnly })
	if d := decision("pod-a"); d.Kill != authority.KillRedis || d.Version != 4 {
		t.Errorf("pod-a after the kill: %+v; want its kill switch kept (from the audit) at version 4", d)
	}
	if _, err := src.Rejected(); err != nil {
		t.Errorf("still rejected after a valid document loaded: %v", err)
	}
	if a := lastAudit(t, ctl); a.Action != "kill_over_invalid" || a.Before != bad || !strings.Contains(a.After, `"version": 4`) {
		t.Errorf("audit: %+v", a)
	}
}

// Without a valid document in the audit, the kill builds on the code
// defaults, at a version above every one seen: the broken document's and
// every replica's applied version (fences carry the versions replicas
// decided at; a lower one would be stale to them).
func TestKillOverAnInvalidDocumentWithoutAudit(t *testing.T) {
	t.Parallel()
	b := setupController(t, true)
	ctx := context.Background()
	if err := os.WriteFile(b.flags.Path, []byte(`{"flags": {"reservations.mode": {"metadata": {"version": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.DB.Exec(`INSERT INTO rollout_replicas (replica_id, pods, applied_version, applied_at, last_seen)
		VALUES ('old-replica', 'pod-a', 9, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := b.ctl.Kill(ctx, flagdoc.Global(), authority.KillRedis, rollout.KillOptions{Actor: "ana", Reason: "everything", Out: &out}); err != nil {
		t.Fatal(err)
	}
	f, err := b.flags.Read()
	if err != nil || f.Version != 10 || f.Kill.State != authority.KillRedis || f.Mode != authority.ModeRedis {
		t.Errorf("after the kill: %+v, %v; want the code defaults plus the kill at version 10", f, err)
	}
	if !strings.Contains(out.String(), "the code defaults") || !strings.Contains(out.String(), "(line 1, column 60)") {
		t.Errorf("the kill does not say what it built on, or where the document was broken:\n%s", out.String())
	}
}

// Writing over an invalid document only replaces the document read: if
// it changed since, nothing is written (ErrFlagsChanged).
func TestReplaceInvalidIsACompareAndSwap(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, store := range []interface {
		flagdoc.FlagStore
		ReplaceInvalid([]byte, *flagdoc.Flags) error
	}{flagdoc.FlagsFile{Path: filepath.Join(t.TempDir(), "flags.json")}, flagdoc.FlagsTable{DB: db.DB}} {
		f := flagdoc.NewFlags()
		f.Version = 4
		if err := store.Write(f); err != nil {
			t.Fatal(err)
		}
		f.Version = 5
		if err := store.ReplaceInvalid([]byte(`{"not": "what is there"`), f); !errors.Is(err, flagdoc.ErrFlagsChanged) {
			t.Errorf("%s: over another document: %v, want ErrFlagsChanged", store, err)
		}
		if got, err := store.Read(); err != nil || got.Version != 4 {
			t.Errorf("%s: %+v, %v; want version 4 untouched", store, got, err)
		}
	}
}

// Unknown variants are refused when written, whichever store and however
// they got into the model (the setters refuse them too): the document is
// left as it was.
func TestWritesRefuseUnknownVariants(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	edits := map[string]func(f *flagdoc.Flags){
		"global mode": func(f *flagdoc.Flags) { f.Mode = "mysqll" },
		"pod mode":    func(f *flagdoc.Flags) { f.Pods["pod-a"] = flagdoc.PodFlags{Mode: "mysqll"} },
		"ramp mode": func(f *flagdoc.Flags) {
			f.Pods["pod-a"] = flagdoc.PodFlags{Mode: authority.ModeShadow, Ramp: &flagdoc.Ramp{Mode: "mysql_fast", Percent: 10}}
		},
		"shop kill": func(f *flagdoc.Flags) {
			f.Shops[7] = flagdoc.ShopFlags{Kill: flagdoc.KillSwitch{State: "redis_onyl", Reason: "x"}}
		},
		"global kill": func(f *flagdoc.Flags) { f.Kill = flagdoc.KillSwitch{State: "offf"} },
	}
	for _, store := range []flagdoc.FlagStore{flagdoc.FlagsFile{Path: filepath.Join(t.TempDir(), "flags.json")}, flagdoc.FlagsTable{DB: db.DB}} {
		if err := store.Write(flagdoc.NewFlags()); err != nil {
			t.Fatal(err)
		}
		for name, edit := range edits {
			f := flagdoc.NewFlags()
			edit(f)
			var fe *flagdoc.FlagsError
			if _, err := f.Render(); !errors.As(err, &fe) || !strings.Contains(err.Error(), "unknown") {
				t.Errorf("%s: Render: %v", name, err)
			}
			if err := store.Write(f); !errors.As(err, &fe) {
				t.Errorf("%s: %s.Write: %v", name, store, err)
			}
			if _, _, err := store.Update(func(f *flagdoc.Flags) error { edit(f); return nil }); !errors.As(err, &fe) {
				t.Errorf("%s: %s.Update: %v", name, store, err)
			}
		}
		f := flagdoc.NewFlags()
		if err := f.EngageKill(flagdoc.Global(), "redis_onyl", flagdoc.Attribution{Reason: "x"}); err == nil {
			t.Error("EngageKill took an unknown state")
		}
		if err := f.SetMode(flagdoc.PodScope("pod-a"), "mysqll"); err == nil {
			t.Error("SetMode took an unknown mode")
		}
		if got, err := store.Read(); err != nil || got.Version != 1 || got.Mode != authority.ModeRedis || len(got.Pods)+len(got.Shops) != 0 {
			t.Errorf("%s after refused writes: %+v, %v", store, got, err)
		}
	}
}

// In a process that runs a flag source (a server), the kill over an
// invalid document builds on the flags that source answers from when they
// are newer than the audit's: a valid change made outside the controller
// (by hand, from git) is kept, not rolled back to the audit's state.
func TestKillOverAnInvalidDocumentKeepsTheFlagsInForce(t *testing.T) {
	t.Parallel()
	b := setupController(t, true)
	ctx := context.Background()
	src, err := flagsource.New(ctx, flagsource.Config{Path: b.flags.Path, PollInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	ctl := b.controller(t, func(c *rollout.ControllerConfig) { c.InForce = src.InForce })
	if _, err := ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Reason: "start"}); err != nil { // audited: version 2
		t.Fatal(err)
	}
	b.setMode(t, "pod-b", authority.ModeMySQL) // not audited: version 3
	waitFor(t, 2*time.Second, "the source to load version 3", func() bool {
		d, err := src.Decide(ctx, "pod-b", 1)
		return err == nil && d.Version == 3
	})
	good, _ := os.ReadFile(b.flags.Path)
	broken := strings.ReplaceAll(strings.Replace(string(good), `"redis": "redis"`, `"redis": "redis",`, 1), `"version": 3`, `"version": 4`)
	if err := os.WriteFile(b.flags.Path, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, rollout.KillOptions{Actor: "bob", Reason: "pod-a", Out: &out}); err != nil {
		t.Fatal(err)
	}
	f, err := b.flags.Read()
	if err != nil || f.Version != 5 || f.Pods["pod-b"].Mode != authority.ModeMySQL || f.Pods["pod-a"].Mode != authority.ModeShadow || !f.KillAt(flagdoc.PodScope("pod-a")).Engaged() {
		t.Errorf("after the kill: %+v, %v; want version 5 with pod-b's mysql kept and pod-a shadow, killed", f, err)
	}
	if !strings.Contains(out.String(), "built from the flags this replica answers from (version 3)") {
		t.Errorf("the kill does not say what it built on:\n%s", out.String())
	}
}

// A document valid on its own that the replicas refuse (its version went
// back, or it changed at the version in force) is no base for a change:
// written on top of it at its version plus one, a kill switch would be
// refused by every replica too. The controller treats it as an invalid
// document: the status says why and is not ready, an advance is refused,
// and a kill writes over it above every version seen, from the last valid
// flags.
func TestKillOverADocumentTheReplicasRefuse(t *testing.T) {
	t.Parallel()
	t.Run("lower than a replica's version", func(t *testing.T) {
		t.Parallel()
		b := setupController(t, true)
		ctx := context.Background()
		if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Reason: "start"}); err != nil { // audited: version 2
			t.Fatal(err)
		}
		// The replicas applied version 5 (changes made outside the
		// controller); then a hand edit goes back to 3.
		if _, err := b.db.DB.Exec(`INSERT INTO rollout_replicas (replica_id, pods, applied_version, applied_at, last_seen)
			VALUES ('replica-1', 'pod-a,pod-b', 5, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`); err != nil {
			t.Fatal(err)
		}
		back, err := b.flags.Read()
		if err != nil {
			t.Fatal(err)
		}
		back.Version = 3
		if err := back.SetMode(flagdoc.PodScope("pod-b"), authority.ModeMySQL); err != nil {
			t.Fatal(err)
		}
		doc, err := back.Render()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(b.flags.Path, doc, 0o644); err != nil {
			t.Fatal(err)
		}
		const why = "metadata.version 3 is lower than the version in force, 5: flags never go back; write a higher version"
		st, err := b.ctl.Status(ctx)
		if err != nil || !strings.Contains(st.FlagsInvalid, why) || st.Ready || st.FlagsVersion != 2 {
			t.Fatalf("status: %+v, %v; want it invalid saying %q, the audit's flags (version 2), not ready", st, err, why)
		}
		if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Reason: "next", Override: true}); err == nil || !strings.Contains(err.Error(), why) {
			t.Fatalf("advance over the refused document: %v, want it refused saying %q", err, why)
		}
		if err := b.ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, rollout.KillOptions{Actor: "bob", Reason: "pod-a p99"}); err != nil {
			t.Fatalf("kill over the refused document: %v", err)
		}
		f, err := b.flags.Read()
		if err != nil || f.Version != 6 || !f.KillAt(flagdoc.PodScope("pod-a")).Engaged() || f.Pods["pod-b"].Mode != "" {
			t.Errorf("after the kill: %+v, %v; want version 6, pod-a killed, pod-b as the audit had it", f, err)
		}
		if a := lastAudit(t, b.ctl); a.Action != "kill_over_invalid" || a.Before != string(doc) || !strings.Contains(a.Reason, why) {
			t.Errorf("audit: %+v", a)
		}
	})

	t.Run("changed at the version in force", func(t *testing.T) {
		t.Parallel()
		b := setupController(t, true)
		ctx := context.Background()
		src, err := flagsource.New(ctx, flagsource.Config{Path: b.flags.Path, PollInterval: 5 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close() })
		ctl := b.controller(t, func(c *rollout.ControllerConfig) { c.InForce = src.InForce })
		if _, err := ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Reason: "start"}); err != nil { // version 2
			t.Fatal(err)
		}
		waitFor(t, 2*time.Second, "the source to load version 2", func() bool { v, ok := src.AppliedVersion(ctx); return ok && v == 2 })
		b.setMode(t, "pod-b", authority.ModeMySQL) // not audited: version 3
		good, err := os.ReadFile(b.flags.Path)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Second, "the source to load version 3", func() bool { v, ok := src.AppliedVersion(ctx); return ok && v == 3 })
		// A hand edit changes the flags but keeps version 3: the source
		// refuses it.
		same := strings.Replace(string(good), `"defaultVariant": "redis"`, `"defaultVariant": "shadow"`, 1) // the global mode
		if err := os.WriteFile(b.flags.Path, []byte(same), 0o644); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Second, "the source to refuse the document", func() bool { _, err := src.Rejected(); return err != nil })
		const why = "metadata.version 3 is the version in force, but the document changed"
		st, err := ctl.Status(ctx)
		if err != nil || !strings.Contains(st.FlagsInvalid, why) || st.Ready {
			t.Fatalf("status: %+v, %v; want it invalid saying %q, not ready", st, err, why)
		}
		if err := ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, rollout.KillOptions{Actor: "bob", Reason: "pod-a p99"}); err != nil {
			t.Fatalf("kill over the refused document: %v", err)
		}
		waitFor(t, 2*time.Second, "the source to load the kill", func() bool {
			d, err := src.Decide(ctx, "pod-a", 1)
			return err == nil && d.Kill == authority.KillRedis && d.Version == 4
		})
		if d, err := src.Decide(ctx, "pod-b", 1); err != nil || d.Mode != authority.ModeMySQL {
			t.Errorf("pod-b after the kill: %+v, %v; want mysql kept from the flags in force (version 3)", d, err)
		}
		if _, err := src.Rejected(); err != nil {
			t.Errorf("still rejected after the kill loaded: %v", err)
		}
	})
}
