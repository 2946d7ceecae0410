package wire_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// bodies is every type of the package: the tests below walk each with
// reflection. TestEveryTypeIsListed fails when a type is missing here.
var bodies = []reflect.Type{
	// The rollout.
	reflect.TypeFor[wire.Kill](), reflect.TypeFor[wire.Decision](), reflect.TypeFor[wire.Ramp](), reflect.TypeFor[wire.Stage](),
	reflect.TypeFor[wire.StageGates](), reflect.TypeFor[wire.PlanStatus](), reflect.TypeFor[wire.PlanPod](), reflect.TypeFor[wire.Evidence](),
	reflect.TypeFor[wire.GateResult](), reflect.TypeFor[wire.Handoffs](), reflect.TypeFor[wire.HandoffReport](), reflect.TypeFor[wire.Replica](),
	reflect.TypeFor[wire.Obedience](), reflect.TypeFor[wire.AuditEntry](), reflect.TypeFor[wire.History](), reflect.TypeFor[wire.ControllerStatus](),
	// The admin API's own.
	reflect.TypeFor[wire.RolloutStatus](), reflect.TypeFor[wire.Pod](), reflect.TypeFor[wire.Shop](), reflect.TypeFor[wire.ScopeState](),
	reflect.TypeFor[wire.RelayLag](), reflect.TypeFor[wire.FlagsRejected](), reflect.TypeFor[wire.KillRequest](), reflect.TypeFor[wire.KillResponse](),
	reflect.TypeFor[wire.AdvanceRequest](), reflect.TypeFor[wire.AdvanceResponse](),
	// The comparer's.
	reflect.TypeFor[wire.Diffs](), reflect.TypeFor[wire.DiffRecord](), reflect.TypeFor[wire.Outcome](), reflect.TypeFor[wire.Stats](),
	reflect.TypeFor[wire.Summary](), reflect.TypeFor[wire.Latency](), reflect.TypeFor[wire.Series](), reflect.TypeFor[wire.SeriesPoint](),
	reflect.TypeFor[wire.Quantiles](),
	// Reconciliation.
	reflect.TypeFor[wire.Reconciliation](), reflect.TypeFor[wire.DriftReport](), reflect.TypeFor[wire.ReconcileReport](), reflect.TypeFor[wire.Finding](),
	// The checkout API.
	reflect.TypeFor[wire.ReserveRequest](), reflect.TypeFor[wire.Line](), reflect.TypeFor[wire.Reservation](), reflect.TypeFor[wire.Allocation](),
	reflect.TypeFor[wire.ShortLine](), reflect.TypeFor[wire.ClaimResponse](), reflect.TypeFor[wire.ReleaseResponse](),
	reflect.TypeFor[wire.AvailabilityResponse](), reflect.TypeFor[wire.LocationAvailability](), reflect.TypeFor[wire.AdjustRequest](),
	reflect.TypeFor[wire.AdjustResponse](),
	// The CLI's own.
	reflect.TypeFor[wire.Version](), reflect.TypeFor[wire.RolloutChange](), reflect.TypeFor[wire.RolloutRefusal](),
	reflect.TypeFor[wire.FlagsInit](), reflect.TypeFor[wire.PodTraffic](), reflect.TypeFor[wire.OrderPods](),
	// Operations and errors.
	reflect.TypeFor[wire.Health](), reflect.TypeFor[wire.Ready](), reflect.TypeFor[wire.StoreHealth](), reflect.TypeFor[wire.SchemaHealth](),
	reflect.TypeFor[wire.Problem](),
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[time.Duration]()
)

// wireProblems lists what breaks the package's conventions in t and every
// type it reaches (doc.go): an exported field without a snake_case json
// tag (an embedded struct without a tag is inline, and walked), a key used
// twice in one object, a time.Time without omitzero, a *time.Time, a
// time.Duration, an interface, or a struct of another package than t's.
// seen stops the walk at types already walked.
func wireProblems(t reflect.Type, seen map[reflect.Type]bool) []string {
	home := t.PkgPath()
	var (
		out        []string
		walkType   func(where string, t reflect.Type)
		walkStruct func(t reflect.Type, keys map[string]string)
	)
	walkType = func(where string, t reflect.Type) {
		switch t.Kind() {
		case reflect.Pointer:
			if t.Elem() == timeType {
				out = append(out, where+": a *time.Time (use time.Time with omitzero)")
				return
			}
			walkType(where, t.Elem())
		case reflect.Slice, reflect.Array:
			walkType(where+"[]", t.Elem())
		case reflect.Map:
			if t.Key().Kind() != reflect.String {
				out = append(out, fmt.Sprintf("%s: a map keyed by %s (JSON keys are strings)", where, t.Key()))
			}
			walkType(where+"{}", t.Elem())
		case reflect.Interface:
			out = append(out, where+": an interface ("+t.String()+"): what it encodes is not a wire type")
		case reflect.Struct:
			switch {
			case t == timeType:
			case t.PkgPath() != home:
				out = append(out, fmt.Sprintf("%s: %s is not a type of package wire: a domain type's encoding would be the wire's", where, t))
			case !seen[t]:
				seen[t] = true
				walkStruct(t, map[string]string{})
			}
		default:
			if t == durationType {
				out = append(out, where+": a time.Duration (use an int64 whose key ends in _ns)")
			}
		}
	}
	walkStruct = func(t reflect.Type, keys map[string]string) {
		for i := range t.NumField() {
			f := t.Field(i)
			where := t.Name() + "." + f.Name
			if !f.IsExported() {
				continue
			}
			tag, hasTag := f.Tag.Lookup("json")
			if f.Anonymous && !hasTag && f.Type.Kind() == reflect.Struct && f.Type.PkgPath() == home {
				walkStruct(f.Type, keys) // inline: its keys are t's
				seen[f.Type] = true
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			switch {
			case !hasTag:
				out = append(out, where+": no json tag (its Go name would be the key)")
				continue
			case !snakeCase.MatchString(name):
				out = append(out, fmt.Sprintf("%s: key %q is not snake_case", where, name))
			case keys[name] != "":
				out = append(out, fmt.Sprintf("%s: key %q is %s's too", where, name, keys[name]))
			}
			keys[name] = where
			if f.Type == timeType && !slices.Contains(strings.Split(opts, ","), "omitzero") {
				out = append(out, where+": a time.Time without omitzero (a zero time would be written as year 1)")
			}
			walkType(where, f.Type)
		}
	}
	walkType(t.Name(), t)
	return out
}

// Every field of every wire type has a snake_case json tag, every time is
// left out when zero, no duration is a time.Duration, and no domain type
// is encoded as it is: the Go names cannot reach the wire again.
func TestWireTypesAreSnakeCaseAndTagged(t *testing.T) {
	t.Parallel()
	seen := map[reflect.Type]bool{}
	var problems []string
	for _, b := range bodies {
		problems = append(problems, wireProblems(b, seen)...)
	}
	// A type embedded inline is walked on its own too: say each once.
	slices.Sort(problems)
	for _, p := range slices.Compact(problems) {
		t.Error(p)
	}
}

// The checker, shown failing on broken subjects: a field without a tag
// (what rollout.Status's Next carried: "Name", "MinObservations"), a
// CamelCase key, a zero time written as year 1, a duration without its
// unit, a domain type and an interface.
func TestWireCheckerCatchesBrokenTypes(t *testing.T) {
	t.Parallel()
	type inner struct {
		Name string // no tag
	}
	type broken struct {
		Untagged  string
		Camel     int           `json:"minObservations"`
		Since     time.Time     `json:"since"`
		SincePtr  *time.Time    `json:"since_ptr,omitempty"`
		Took      time.Duration `json:"took"`
		Domain    reflect.Method
		Anything  any                 `json:"anything"`
		Nested    inner               `json:"nested"`
		Foreign   reflect.StructField `json:"foreign"`
		unexposed int
	}
	_ = broken{}.unexposed // never encoded: the checker must pass over it
	got := strings.Join(wireProblems(reflect.TypeFor[broken](), map[reflect.Type]bool{}), "\n")
	for _, want := range []string{
		"broken.Untagged: no json tag",
		`broken.Camel: key "minObservations" is not snake_case`,
		"broken.Since: a time.Time without omitzero",
		"broken.SincePtr: a *time.Time",
		"broken.Took: a time.Duration",
		"broken.Domain: no json tag",
		"broken.Anything: an interface",
		"inner.Name: no json tag",
		"broken.Foreign: reflect.StructField is not a type of package wire",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the checker missed %q; it said:\n%s", want, got)
		}
	}
	if strings.Contains(got, "unexposed") {
		t.Errorf("an unexported field reported:\n%s", got)
	}
	// Two fields with one key (built at run time: vet refuses it in a
	// declaration, as it should).
	str := reflect.TypeFor[string]()
	twice := reflect.StructOf([]reflect.StructField{{Name: "Again", Type: str, Tag: `json:"again"`}, {Name: "AgainToo", Type: str, Tag: `json:"again"`}})
	if got := wireProblems(twice, map[reflect.Type]bool{}); !slices.Contains(got, `.AgainToo: key "again" is .Again's too`) {
		t.Errorf("the checker missed a key given twice; it said %v", got)
	}
}

// parsePackage parses the package's own files (not its tests), by name.
func parsePackage(t *testing.T) map[string]*ast.File {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	fset := token.NewFileSet()
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			if files[name], err = parser.ParseFile(fset, name, nil, parser.ParseComments); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(files) == 0 {
		t.Fatal("no Go file here")
	}
	return files
}

// Every exported type of the package is in bodies (so the walk covers
// it), and it and each of its fields have a doc comment: the wire is
// documented once, here.
func TestEveryTypeIsListedAndDocumented(t *testing.T) {
	t.Parallel()
	listed := map[string]bool{}
	for _, b := range bodies {
		listed[b.Name()] = true
	}
	for name, f := range parsePackage(t) {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				if !ts.Name.IsExported() {
					continue
				}
				if !listed[ts.Name.Name] {
					t.Errorf("%s: type %s is not in bodies: the walk does not check it", name, ts.Name.Name)
				}
				if ts.Doc == nil && g.Doc == nil {
					t.Errorf("%s: type %s has no doc comment", name, ts.Name.Name)
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, fld := range st.Fields.List {
					if fld.Doc == nil && fld.Comment == nil {
						t.Errorf("%s: a field of %s (%s) has no doc comment", name, ts.Name.Name, fieldName(fld))
					}
					if len(fld.Names) > 1 {
						t.Errorf("%s: %s declares %s on one line: give each field its own doc", name, ts.Name.Name, fieldName(fld))
					}
				}
			}
		}
	}
}

func fieldName(f *ast.Field) string {
	if len(f.Names) == 0 {
		return fmt.Sprint(f.Type)
	}
	var names []string
	for _, n := range f.Names {
		names = append(names, n.Name)
	}
	return strings.Join(names, ", ")
}

// The plan's status as the wire shows it, where the rollout package's own
// encoding went wrong: a stage never applied and a kill switch never set
// have no time (not year 1), a switch never set is "off", the next stage
// and the decisions are snake_case, a pod's handoff report is judged (its
// ages as of now, in nanoseconds) and an unreadable one says why, and
// every list is [] rather than null.
func TestPlanStatusOf(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	report := reservation.HandoffProgress{FlagsVersion: 4, Shops: 3, Done: 1, Pending: 2, OldestPending: now.Add(-2 * time.Second),
		Started: now.Add(-3 * time.Second), Updated: now, Replica: "r1"}
	st := rollout.Status{Stage: -1, FlagsVersion: 4,
		Next: &rollout.Stage{Name: "shadow on pod-a", Mode: authority.ModeShadow, Pods: []string{"pod-a"},
			Gates: rollout.Gates{MinObservations: 5, MinDuration: rollout.Duration{Duration: time.Minute}, MaxRates: map[compare.Class]float64{compare.ClassShadowMissing: 0.005}}},
		Pods: []rollout.PodStatus{
			{Pod: "pod-a", Mode: authority.ModeMySQL, Kill: flagdoc.KillSwitch{State: authority.KillRedis, Reason: "p99", Actor: "ana", Since: now},
				Effective: authority.Decision{Mode: authority.ModeMySQL, Kill: authority.KillRedis, Version: 4}, Handoffs: &report},
			{Pod: "pod-b", Effective: authority.Decision{Mode: authority.ModeRedis, Kill: authority.KillOff, Version: 4}, HandoffsError: "pod-b's mysql is down"},
		}}
	raw, err := json.Marshal(wire.PlanStatusOf(st, now))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, want := range []string{
		`"stage":-1,"stage_name":"","next":{"index":0,"name":"shadow on pod-a","mode":"shadow","pods":["pod-a"],"percent":0,"state":"next",` +
			`"gates":{"min_observations":5,"min_duration_ns":60000000000,"max_rates":{"shadow_missing":0.005},"max_shadow_error_rate":0,"max_latency_ratio":0}}`,
		`"kill":{"state":"redis","reason":"p99","actor":"ana","since":"2026-03-01T12:00:00Z"}`,
		`"effective":{"mode":"mysql","kill":"redis","authority":"redis","effective":"shadow","version":4}`,
		`"handoffs":{"state":"pending","line":"2 of 3 shops pending, oldest 2s (flags version 4)","report":{"flags_version":4,"shops":3,"done":1,"pending":2,"failed":0,` +
			`"oldest_pending":"2026-03-01T11:59:58Z","oldest_pending_age_ns":2000000000,"started":"2026-03-01T11:59:57Z","took_ns":0,"updated":"2026-03-01T12:00:00Z","replica":"r1"},"flags_version":4}`,
		`{"pod":"pod-b","mode":"","kill":{"state":"off"},`,
		`"handoffs":{"state":"unknown","line":"unknown: pod-b's mysql is down","report":null,"error":"pod-b's mysql is down","flags_version":4}`,
		`"evidence":{"pods":[],"observations":0,"classes":{},`,
		`"gates":[],"ready":false}`,
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the plan's status lacks\n  %s\nin\n  %s", want, doc)
		}
	}
	// The one null is pod-b's report, which could not be read.
	if strings.Contains(doc, "0001-01-01") || strings.Count(doc, "null") != 1 {
		t.Errorf("a zero time, or a null besides pod-b's report: %s", doc)
	}
}

// Each gate carries its verdict in words, "pass", "not yet" or "breaking",
// the strings `reservoir rollout status` prints and the dashboard shows;
// pass and breaking say the same in booleans. A stage's status says when
// its evidence counts from (counting_from), and min_duration's value is
// never negative.
func TestGateVerdictsOnTheWire(t *testing.T) {
	t.Parallel()
	g := rollout.Gates{MinObservations: 100, MinDuration: rollout.Duration{Duration: time.Minute},
		MaxRates: map[compare.Class]float64{compare.ClassAllocationMismatch: 0.001, compare.ClassOutcomeMismatch: 0.001}, MaxShadowErrorRate: 0.01}
	e := rollout.Evidence{Pods: []string{"pod-a"}, Observations: 1000,
		Classes: map[compare.Class]int64{compare.ClassMatch: 998, compare.ClassAllocationMismatch: 2}}
	since := time.Date(2026, 3, 1, 12, 0, 37, 0, time.UTC)
	st := rollout.Status{Stage: 0, StageName: "shadow on pod-a", Since: since, CountingFrom: since.Truncate(time.Minute).Add(time.Minute),
		Evidence: e, Gates: g.Evaluate(e, -5*time.Second)}
	raw, err := json.Marshal(wire.PlanStatusOf(st, since))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		CountingFrom string           `json:"counting_from"`
		Gates        []map[string]any `json:"gates"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.CountingFrom != "2026-03-01T12:01:00Z" {
		t.Errorf("counting_from %q, want 2026-03-01T12:01:00Z", doc.CountingFrom)
	}
	want := map[string]string{"min_observations": "pass", "min_duration": "not yet", "max_rate:allocation_mismatch": "breaking",
		"max_rate:outcome_mismatch": "pass", "max_shadow_error_rate": "pass"}
	for _, gv := range doc.Gates {
		name, verdict := gv["gate"].(string), gv["verdict"]
		if verdict != want[name] {
			t.Errorf("gate %s: verdict %v, want %q", name, verdict, want[name])
		}
		if gv["pass"] != (verdict == "pass") || gv["breaking"] != (verdict == "breaking") {
			t.Errorf("gate %s: pass %v, breaking %v, verdict %v disagree", name, gv["pass"], gv["breaking"], verdict)
		}
		if name == "min_duration" && gv["value"].(float64) < 0 {
			t.Errorf("min_duration: value %v, a negative duration", gv["value"])
		}
	}
	if len(doc.Gates) != len(want) {
		t.Errorf("%d gates, want %d: %s", len(doc.Gates), len(want), raw)
	}
}
