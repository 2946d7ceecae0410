package flagdoc_test

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/murmur3"

	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc/flagdoctest"

	"github.com/seed31b0e981/reservoir/rollout/authority"

	schemas "github.com/open-feature/flagd-schemas/json"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestFlagsRenderGolden(t *testing.T) {
	for name, f := range map[string]*flagdoc.Flags{
		"rollout":     flagdoctest.Rollout(t),
		"global-kill": flagdoctest.GlobalKill(t),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := f.Render()
			must(t, err)
			again, err := f.Clone().Render()
			must(t, err)
			if !bytes.Equal(got, again) {
				t.Fatal("two renders of one state differ")
			}
			golden := filepath.Join("testdata", "flags-"+name+".golden.json")
			if *update {
				must(t, os.WriteFile(golden, got, 0o644))
			}
			want, err := os.ReadFile(golden)
			must(t, err)
			if !bytes.Equal(got, want) {
				t.Errorf("render differs from %s (go test ./rollout/flagdoc -run Golden -update to accept):\n%s", golden, got)
			}
		})
	}
}

func TestFlagsRoundTrip(t *testing.T) {
	states := map[string]*flagdoc.Flags{
		"redis-safe":  flagdoc.NewFlags(),
		"rollout":     flagdoctest.Rollout(t),
		"global-kill": flagdoctest.GlobalKill(t),
	}
	released := flagdoctest.GlobalKill(t)
	must(t, released.ReleaseKill(flagdoc.Global(), flagdoc.Attribution{Reason: "failover done"}))
	states["released"] = released
	for name, f := range states {
		t.Run(name, func(t *testing.T) {
			data, err := f.Render()
			must(t, err)
			back, err := flagdoc.ParseFlags(data)
			must(t, err)
			if !reflect.DeepEqual(back, f) {
				t.Fatalf("round trip changed the state:\n got %+v\nwant %+v", back, f)
			}
		})
	}
	// Releasing the global switch leaves the narrower ones engaged.
	if k := released.KillAt(flagdoc.PodScope("pod-c")); k.State != authority.KillRedis || k.Reason == "" {
		t.Fatalf("pod-c switch after global release = %+v", k)
	}
}

// The rendered file conforms to flagd's schema (flagd only warns on a
// violation, so nothing else would catch one).
func TestFlagsRenderMatchesFlagdSchema(t *testing.T) {
	c := jsonschema.NewCompiler()
	for url, doc := range map[string]string{
		"https://flagd.dev/schema/v0/flags.json":     schemas.FlagSchema,
		"https://flagd.dev/schema/v0/targeting.json": schemas.TargetingSchema,
	} {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
		must(t, err)
		must(t, c.AddResource(url, v))
	}
	sch, err := c.Compile("https://flagd.dev/schema/v0/flags.json")
	must(t, err)
	for _, f := range []*flagdoc.Flags{flagdoc.NewFlags(), flagdoctest.Rollout(t), flagdoctest.GlobalKill(t)} {
		data, err := f.Render()
		must(t, err)
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		must(t, err)
		if err := sch.Validate(inst); err != nil {
			t.Errorf("rendered file violates flagd's schema: %v\n%s", err, data)
		}
	}
}

// The documented file in deploy/flags is the canonical render of the
// Redis-safe state at version 1, so the writer rewrites it without a diff.
func TestDeployFlagsFileIsCanonical(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "flags", "reservoir.flagd.json")
	data, err := os.ReadFile(path)
	must(t, err)
	f, err := flagdoc.ParseFlags(data)
	must(t, err)
	safe := flagdoc.NewFlags()
	safe.Version = 1
	if !reflect.DeepEqual(f, safe) {
		t.Errorf("%s is not the Redis-safe state at version 1: %+v", path, f)
	}
	want, err := safe.Render()
	must(t, err)
	if !bytes.Equal(data, want) {
		t.Errorf("%s is not in canonical form; want:\n%s", path, want)
	}
}

func TestFlagsResolve(t *testing.T) {
	f := flagdoctest.Rollout(t)
	// Shops 5 and 6 sit on either side of pod-b's 25% ramp.
	in, out := rampShops(t, 25)
	cases := []struct {
		pod  string
		shop int64
		want authority.Decision
	}{
		{"pod-x", 5, authority.Decision{Mode: authority.ModeShadow, Kill: authority.KillOff}},          // global mode
		{"pod-a", 5, authority.Decision{Mode: authority.ModeMySQL, Kill: authority.KillOff}},           // pod mode
		{"pod-b", in, authority.Decision{Mode: authority.ModeMySQL, Kill: authority.KillOff}},          // in the ramp
		{"pod-b", out, authority.Decision{Mode: authority.ModeShadow, Kill: authority.KillOff}},        // outside it: the pod's mode
		{"pod-a", 1001, authority.Decision{Mode: authority.ModeMySQLOnly, Kill: authority.KillOff}},    // shop beats pod
		{"pod-b", 1002, authority.Decision{Mode: authority.ModeRedis, Kill: authority.KillOff}},        // shop beats ramp
		{"pod-c", 5, authority.Decision{Mode: authority.ModeShadow, Kill: authority.KillRedis}},        // pod switch
		{"pod-a", 1003, authority.Decision{Mode: authority.ModeMySQL, Kill: authority.KillRedisOnly}},  // shop switch
		{"pod-c", 1003, authority.Decision{Mode: authority.ModeShadow, Kill: authority.KillRedisOnly}}, // strongest switch wins
		{"pod-c", 1001, authority.Decision{Mode: authority.ModeMySQLOnly, Kill: authority.KillRedis}},  // kill and mode both kept
		{"pod-x", 1003, authority.Decision{Mode: authority.ModeShadow, Kill: authority.KillRedisOnly}}, // shop switch on any pod
	}
	for _, c := range cases {
		c.want.Version = f.Version
		if got := f.Resolve(c.pod, c.shop); got != c.want {
			t.Errorf("Resolve(%s, %d) = %+v, want %+v", c.pod, c.shop, got, c.want)
		}
	}
	g := flagdoctest.GlobalKill(t)
	if got := g.Resolve("pod-c", 5); got.Kill != authority.KillRedisOnly || got.Version != 42 {
		t.Errorf("global redis_only over pod-c redis: got %+v, want redis_only at version 42", got)
	}
}

// rampShops returns one shop inside a ramp of percent and one outside.
func rampShops(t testing.TB, percent int) (in, out int64) {
	t.Helper()
	for shop := int64(1); in == 0 || out == 0; shop++ {
		if shop > 10000 {
			t.Fatal("no shops on both sides of the ramp")
		}
		if shop >= 1000 && shop < 1100 {
			continue // keep clear of the shops with overrides
		}
		if inRamp(shop, percent) {
			if in == 0 {
				in = shop
			}
		} else if out == 0 {
			out = shop
		}
	}
	return in, out
}

func TestRampGrowsMonotonically(t *testing.T) {
	for shop := int64(1); shop <= 20000; shop++ {
		for _, p := range []int{1, 5, 10, 25, 50, 75, 99} {
			if inRamp(shop, p) && !inRamp(shop, p+1) {
				t.Fatalf("shop %d is in the %d%% ramp but not in the %d%% one", shop, p, p+1)
			}
		}
	}
	n := 0
	for shop := int64(1); shop <= 20000; shop++ {
		if inRamp(shop, 25) {
			n++
		}
	}
	if n < 4600 || n > 5400 {
		t.Errorf("25%% ramp holds %d of 20000 shops", n)
	}
}

// SetRamp takes every percentage from 0 to 100 and nothing outside:
// 0 ends a pod's ramp (every shop back to the pod's mode), 100 makes the
// ramp's mode the pod's, and -1 or 101 are refused with nothing changed.
func TestSetRampTakesZeroToHundred(t *testing.T) {
	ramped := func() *flagdoc.Flags {
		f := flagdoc.NewFlags()
		must(t, f.SetMode(flagdoc.Global(), authority.ModeShadow))
		must(t, f.SetRamp("pod-b", authority.ModeMySQL, 25))
		return f
	}
	in, _ := rampShops(t, 25)

	f := ramped()
	must(t, f.SetRamp("pod-b", authority.ModeMySQL, 0))
	if p := f.Pods["pod-b"]; p.Ramp != nil || p.Mode != authority.ModeShadow {
		t.Errorf("pod-b after a 0%% ramp: %+v, want no ramp, in shadow", p)
	}
	if d := f.Resolve("pod-b", in); d.Mode != authority.ModeShadow {
		t.Errorf("shop %d, in the ramp before it ended: %s, want shadow", in, d.Mode)
	}

	f = ramped()
	must(t, f.SetRamp("pod-b", authority.ModeMySQL, 100))
	if p := f.Pods["pod-b"]; p.Ramp != nil || p.Mode != authority.ModeMySQL {
		t.Errorf("pod-b after a 100%% ramp: %+v, want no ramp, in mysql", p)
	}

	for _, percent := range []int{-1, 101} {
		f = ramped()
		err := f.SetRamp("pod-b", authority.ModeMySQL, percent)
		var fe *flagdoc.FlagsError
		if !errors.As(err, &fe) || fe.Field != `pods["pod-b"].ramp.percent` {
			t.Errorf("SetRamp(%d): %v, want a FlagsError on pods[\"pod-b\"].ramp.percent", percent, err)
		}
		if p := f.Pods["pod-b"]; p.Ramp == nil || p.Ramp.Percent != 25 {
			t.Errorf("pod-b after the refused SetRamp(%d): %+v, want its 25%% ramp kept", percent, p)
		}
	}
}

func TestFlagsValidateNamesTheField(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(f *flagdoc.Flags) error
		field string
	}{
		{"unknown global mode", func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.Global(), "mysqll") }, "mode"},
		{"unknown pod mode", func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.PodScope("pod-b"), "fast") }, `pods["pod-b"].mode`},
		{"unknown shop mode", func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.ShopScope(7), "fast") }, "shops[7].mode"},
		{"ramp percent", func(f *flagdoc.Flags) error { return f.SetRamp("pod-b", authority.ModeMySQL, 150) }, `pods["pod-b"].ramp.percent`},
		{"ramp to own mode", func(f *flagdoc.Flags) error { return f.SetRamp("pod-b", authority.ModeRedis, 10) }, `pods["pod-b"].ramp.mode`},
		{"kill without reason", func(f *flagdoc.Flags) error {
			return f.EngageKill(flagdoc.PodScope("pod-b"), authority.KillRedis, flagdoc.Attribution{Actor: "x"})
		}, `pods["pod-b"].kill.reason`},
		{"release without reason", func(f *flagdoc.Flags) error { return f.ReleaseKill(flagdoc.Global(), flagdoc.Attribution{}) }, "kill.reason"},
		{"engage off", func(f *flagdoc.Flags) error {
			return f.EngageKill(flagdoc.ShopScope(9), authority.KillOff, flagdoc.Attribution{Reason: "r"})
		}, "shops[9].kill"},
		{"clear global mode", func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.Global(), "") }, "mode"},
		{"bad state written directly", func(f *flagdoc.Flags) error {
			f.Pods["pod-b"] = flagdoc.PodFlags{Ramp: &flagdoc.Ramp{Mode: authority.ModeMySQL, Percent: 10}}
			f.Shops[4] = flagdoc.ShopFlags{Kill: flagdoc.KillSwitch{State: "maybe"}}
			return f.Validate()
		}, `pods["pod-b"].mode`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.edit(flagdoc.NewFlags())
			var fe *flagdoc.FlagsError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v, want a *FlagsError", err)
			}
			if fe.Field != c.field {
				t.Errorf("field %q, want %q (%v)", fe.Field, c.field, err)
			}
		})
	}
}

func TestParseScope(t *testing.T) {
	for _, s := range []flagdoc.Scope{flagdoc.Global(), flagdoc.PodScope("pod-b"), flagdoc.ShopScope(1001)} {
		got, err := flagdoc.ParseScope(s.String())
		if err != nil || got != s {
			t.Errorf("ParseScope(%q) = %+v, %v", s.String(), got, err)
		}
	}
	for _, bad := range []string{"", "pods:a", "pod:", "pod:Pod B", "shop:x", "shop:-1", "global:x"} {
		if _, err := flagdoc.ParseScope(bad); err == nil {
			t.Errorf("ParseScope(%q) accepted", bad)
		}
	}
}

// Hand-written variations docs/flags.md allows parse to the same state.
func TestParseFlagsHandWritten(t *testing.T) {
	hand := `{"flags": {
	  "reservations.mode": {"state": "ENABLED", "defaultVariant": "shadow",
	    "variants": {"redis": "redis", "shadow": "shadow", "mysql": "mysql"},
	    "metadata": {"version": 3},
	    "targeting": {"if": [
	      {"in": [{"var": "shop"}, ["1001", 1002]]}, "redis",
	      {"==": [{"var": "pod"}, "pod-a"]}, "mysql",
	      {"in": [{"var": "pod"}, ["pod-d", "pod-e"]]}, {"fractional": [["mysql", 10], ["shadow", 90]]}
	    ]}},
	  "reservations.kill_switch": {"state": "ENABLED", "defaultVariant": "redis",
	    "variants": {"off": "off", "redis": "redis", "redis_only": "redis_only"},
	    "targeting": {"if": [{"==": [{"var": "pod"}, "pod-c"]}, "redis", null]},
	    "metadata": {"pod:pod-c.reason": "by hand", "pod:pod-b.reason": "stale, released", "version": 3}}
	}}`
	got, err := flagdoc.ParseFlags([]byte(hand))
	must(t, err)
	want := flagdoc.NewFlags()
	want.Version = 3
	must(t, want.SetMode(flagdoc.Global(), authority.ModeShadow))
	must(t, want.SetMode(flagdoc.ShopScope(1001), authority.ModeRedis))
	must(t, want.SetMode(flagdoc.ShopScope(1002), authority.ModeRedis))
	must(t, want.SetMode(flagdoc.PodScope("pod-a"), authority.ModeMySQL))
	for _, pod := range []string{"pod-d", "pod-e"} {
		must(t, want.SetRamp(pod, authority.ModeMySQL, 10))
	}
	want.Pods["pod-c"] = flagdoc.PodFlags{Kill: flagdoc.KillSwitch{State: authority.KillRedis, Reason: "by hand"}}
	want.Kill = flagdoc.KillSwitch{State: authority.KillRedis, Reason: flagdoc.NoReason}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestParseFlagsRefuses(t *testing.T) {
	mode := func(variants, def, targeting string) string {
		return `{"flags": {"reservations.mode": {"state": "ENABLED", "variants": ` + variants +
			`, "defaultVariant": "` + def + `"` + targeting + `}}}`
	}
	kill := func(targeting string) string {
		return `{"flags": {"reservations.kill_switch": {"state": "ENABLED", "defaultVariant": "redis_only",
			"variants": {"off": "off", "redis": "redis", "redis_only": "redis_only"}, "targeting": ` + targeting + `}}}`
	}
	allModes := `{"redis": "redis", "shadow": "shadow", "mysql": "mysql"}`
	// versioned writes both flags with metadata {"version": <mode>} and
	// {"version": <kill>}; "" leaves the metadata out.
	versioned := func(mode, kill string) string {
		meta := func(v string) string {
			if v == "" {
				return ""
			}
			return `, "metadata": {"version": ` + v + `}`
		}
		return `{"flags": {
			"reservations.mode": {"state": "ENABLED", "variants": {"redis": "redis"}, "defaultVariant": "redis"` + meta(mode) + `},
			"reservations.kill_switch": {"state": "ENABLED", "variants": {"off": "off"}, "defaultVariant": "off"` + meta(kill) + `}}}`
	}
	cases := []struct {
		name, doc, field string
	}{
		{"invalid JSON", `{"flags": {`, "file"},
		{"unknown variant", mode(`{"redis": "redis", "mysqll": "mysqll"}`, "redis", ""), `flags["reservations.mode"].variants["mysqll"]`},
		{"variant value differs", mode(`{"redis": "mysql"}`, "redis", ""), `flags["reservations.mode"].variants["redis"]`},
		{"default not a variant", mode(`{"redis": "redis"}`, "shadow", ""), `flags["reservations.mode"].defaultVariant`},
		{"unknown flag", `{"flags": {"reservations.turbo": {}}}`, `flags["reservations.turbo"]`},
		{"unknown top-level key", `{"flags": {}, "metadata": {"flagSetId": "x"}}`, "metadata"},
		{"disabled flag", `{"flags": {"reservations.mode": {"state": "DISABLED", "variants": {"redis": "redis"}, "defaultVariant": "redis"}}}`, `flags["reservations.mode"].state`},
		{"shop rule after pod rule", mode(allModes, "redis", `, "targeting": {"if": [
			{"==": [{"var": "pod"}, "pod-a"]}, "mysql", {"in": [{"var": "shop"}, [1]]}, "redis", null]}`), `flags["reservations.mode"].targeting.if[2]`},
		{"foreign rule", mode(allModes, "redis", `, "targeting": {"if": [{"starts_with": [{"var": "pod"}, "pod"]}, "mysql", null]}`), `flags["reservations.mode"].targeting.if[0]`},
		{"ramp not 100", mode(allModes, "redis", `, "targeting": {"if": [{"==": [{"var": "pod"}, "pod-a"]}, {"fractional": [["mysql", 30], ["shadow", 30]]}, null]}`), `flags["reservations.mode"].targeting.if[1].fractional`},
		{"targeted variant missing", mode(allModes, "redis", `, "targeting": {"if": [{"==": [{"var": "pod"}, "pod-a"]}, "mysql_only", null]}`), `flags["reservations.mode"].targeting.if[1]`},
		{"kill off rule", kill(`{"if": [true, "redis_only", {"in": [{"var": "shop"}, [1]]}, "off", null]}`), `flags["reservations.kill_switch"].targeting.if[2]`},
		{"kill weaker unguarded", kill(`{"if": [{"in": [{"var": "shop"}, [1]]}, "redis", null]}`), `flags["reservations.kill_switch"].targeting.if[0]`},
		{"kill order", `{"flags": {"reservations.kill_switch": {"state": "ENABLED", "defaultVariant": "off",
			"variants": {"off": "off", "redis": "redis", "redis_only": "redis_only"},
			"targeting": {"if": [{"in": [{"var": "shop"}, [1]]}, "redis", {"in": [{"var": "shop"}, [2]]}, "redis_only"]}}}}`,
			`flags["reservations.kill_switch"].targeting.if[2]`},
		{"versions disagree", versioned("7", "8"), `flags["reservations.mode"].metadata.version`},
		{"version on one flag only", versioned("7", ""), `flags["reservations.mode"].metadata.version`},
		{"version on the only flag", mode(allModes, "redis", `, "metadata": {"version": 7}`), `flags["reservations.mode"].metadata.version`},
		{"version as a string", versioned(`"7"`, `"7"`), `flags["reservations.kill_switch"].metadata.version`},
		{"negative version", versioned("-1", "-1"), `flags["reservations.kill_switch"].metadata.version`},
		{"fractional version", versioned("7.5", "7.5"), `flags["reservations.kill_switch"].metadata.version`},
		{"version beyond 2^53", versioned("9007199254740993", "9007199254740993"), `flags["reservations.kill_switch"].metadata.version`},
		{"other metadata on the mode flag", mode(allModes, "redis", `, "metadata": {"owner": "ana"}`), `flags["reservations.mode"].metadata["owner"]`},
		{"unknown metadata on the kill switch", versioned("7", `7, "owner": "ana"`), `flags["reservations.kill_switch"].metadata["owner"]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := flagdoc.ParseFlags([]byte(c.doc))
			var fe *flagdoc.FlagsError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v, want a *FlagsError", err)
			}
			if fe.Field != c.field {
				t.Errorf("field %q, want %q (%v)", fe.Field, c.field, err)
			}
		})
	}
}

// A document without a version is refused: an empty one, one without
// reservoir's flags (they carry the version), and one whose flags carry
// none or 0. Decisions from it could never hand a shop off.
func TestParseFlagsRequiresAVersion(t *testing.T) {
	for doc, want := range map[string]string{
		"":              "the document is empty",
		"  \n":          "the document is empty",
		`{}`:            causeRequired,
		`{"flags": {}}`: causeRequired,
		`{"flags": {"reservations.mode": {"state": "ENABLED", "variants": {"redis": "redis"}, "defaultVariant": "redis", "metadata": {"version": 0}},
		  "reservations.kill_switch": {"state": "ENABLED", "variants": {"off": "off"}, "defaultVariant": "off", "metadata": {"version": 0}}}}`: causeRequired,
	} {
		f, err := flagdoc.ParseFlags([]byte(doc))
		var fe *flagdoc.FlagsError
		if f != nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseFlags(%q) = %+v, %v; want a FlagsError saying %q", doc, f, err, want)
		}
	}
}

// inRamp is the documented bucketing of a ramp (docs/flags.md), written
// out independently of flagd: a shop is in a ramp of percent% when
// murmur3 of the flag key and the shop id, scaled to 0-99, is below
// percent. Resolve evaluates through flagd's own evaluator; this oracle
// holds it to the documentation.
func inRamp(shop int64, percent int) bool {
	if percent <= 0 {
		return false
	}
	h := murmur3.StringSum32(flagdoc.FlagMode + strconv.FormatInt(shop, 10))
	return (uint64(h)*100)>>32 < uint64(percent)
}

// causeRequired is how a refusal names a document without a version.
const causeRequired = "metadata.version is required (a positive integer that grows with every change)"
