package flagsource

import (
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// An unknown variant in a running source's newest document is a rejected
// document: the source keeps answering from the last valid flags (the
// engaged kill switch included, never read as "off"), reports the
// rejection with where it is, and clears it once a valid document loads.
func TestFlagSourceRejectsUnknownVariantsWhileRunning(t *testing.T) {
	t.Parallel()
	valid := flagdoc.NewFlags()
	must(t, valid.SetMode(flagdoc.PodScope("pod-a"), authority.ModeMySQL))
	must(t, valid.EngageKill(flagdoc.PodScope("pod-b"), authority.KillRedis, flagdoc.Attribution{Actor: "ana", Reason: "pod-b slow"}))
	valid.Version = 2
	good, err := valid.Render()
	must(t, err)
	bump := func(doc string) string { return strings.ReplaceAll(doc, `"version": 2`, `"version": 3`) }

	for name, tc := range map[string]struct{ edit, want string }{
		"mysqll": {
			bump(strings.ReplaceAll(strings.Replace(string(good), `"mysql": "mysql"`, `"mysqll": "mysqll"`, 1), `{"$ref": "pod:pod-a"}, "mysql"`, `{"$ref": "pod:pod-a"}, "mysqll"`)),
			`flags["reservations.mode"].variants["mysqll"] (line `,
		},
		"kill switch redis_onyl": {
			bump(strings.Replace(strings.Replace(string(good), `"redis_only": "redis_only"`, `"redis_onyl": "redis_onyl"`, 1), `"defaultVariant": "off"`, `"defaultVariant": "redis_onyl"`, 1)),
			`flags["reservations.kill_switch"].variants["redis_onyl"] (line `,
		},
		// The variants are intact; a rule answers one they lack. flagd
		// takes the document, and would answer pod-b's shops with an
		// error instead of its engaged kill switch.
		"kill switch rule answers redis_onyl": {
			bump(strings.Replace(string(good), `{"$ref": "pod:pod-b"}, "redis"`, `{"$ref": "pod:pod-b"}, "redis_onyl"`, 1)),
			`flags["reservations.kill_switch"].targeting.if[1] (line `,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fx := setup(t, valid, "")
			src := fx.source(t)
			want := func() {
				t.Helper()
				if d := decide(t, src, "pod-a", 1); d != (authority.Decision{Mode: authority.ModeMySQL, Kill: authority.KillOff, Version: 2}) {
					t.Errorf("pod-a after the rejected document: %+v, want the last valid flags (mysql at version 2)", d)
				}
				if d := decide(t, src, "pod-b", 1); d != (authority.Decision{Mode: authority.ModeRedis, Kill: authority.KillRedis, Version: 2}) {
					t.Errorf("pod-b after the rejected document: %+v, want its kill switch engaged (version 2)", d)
				}
			}
			if _, err := src.Rejected(); err != nil {
				t.Fatalf("rejected at start: %v", err)
			}
			fx.replace(t, tc.edit)
			eventually(t, 2*time.Second, "the document to be rejected", func() bool { _, err := src.Rejected(); return err != nil })
			at, err := src.Rejected()
			if !strings.Contains(err.Error(), tc.want) || time.Since(at) > time.Minute || !src.Loaded() {
				t.Errorf("Rejected() = %v, %v (loaded %v); want an error containing %s", at, err, src.Loaded(), tc.want)
			}
			want()
			if fx.logs.count("flags file rejected; keeping the last valid flags") != 1 {
				t.Errorf("want one log line for the rejection:\n%s", fx.logs)
			}
			// Put back as it was: the version in force is the newest again.
			fx.replace(t, string(good))
			eventually(t, 2*time.Second, "the rejection to clear", func() bool { _, err := src.Rejected(); return err == nil })
			want()
			// A fix at a new version loads and keeps it clear.
			fx.replace(t, tc.edit)
			eventually(t, 2*time.Second, "the document to be rejected again", func() bool { _, err := src.Rejected(); return err != nil })
			next := valid.Clone()
			next.Version = 4
			must(t, fx.file.Write(next))
			eventually(t, 2*time.Second, "the fix to load", func() bool { return decide(t, src, "pod-a", 1).Version == 4 })
			if _, err := src.Rejected(); err != nil {
				t.Errorf("still rejected after a valid document loaded: %v", err)
			}
		})
	}
}
