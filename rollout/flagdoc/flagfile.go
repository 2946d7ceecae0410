package flagdoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// The flags file is flagd's JSON flag format (docs/flags.md), so the same
// file serves the in-process provider and the flagd daemon. Render writes
// it in one canonical form (sorted, indented, so a diff of two renders is
// the change); ParseFlags reads that form back, plus the small variations
// a person editing by hand is likely to write, and refuses anything it
// cannot represent rather than dropping it on the next write.
//
// Both flags carry the version of the flags in their metadata
// ("version": a number), because flagd returns a flag's own metadata with
// each evaluation: the version FlagSource reports is the one of the very
// variants it evaluated, never a neighbouring version's.

const (
	flagsSchema  = "https://flagd.dev/schema/v0/flags.json"
	flagsComment = "reservoir rollout flags; see docs/flags.md. Change it with `reservoir rollout`, " +
		"or write a copy next to it, raise metadata.version by one in both flags, and rename the copy over it: " +
		"never edit it in place, never delete and recreate it."
	// podEvaluatorPrefix names the shared $evaluators that select a pod.
	podEvaluatorPrefix = "pod:"
)

// metadata keys: "version" on both flags; "<scope>.reason" and so on on
// the kill switch.
const (
	// MetaVersion is the metadata key of both flags' version (the
	// document's version, docs/flags.md).
	MetaVersion = "version"
	metaReason  = ".reason"
	metaActor   = ".actor"
	metaSince   = ".since"
)

// MaxVersion is the highest version a file may carry: flagd hands metadata
// numbers over as float64, which holds every integer up to 2^53 exactly.
const MaxVersion = 1 << 53

// fileDoc is the flags file before layout.
type fileDoc struct {
	Schema     string
	Comment    string
	Evaluators map[string]any
	Flags      map[string]flagDoc
}

// flagDoc is one flag; Targeting is the "if" list: condition, variant,
// ..., null.
type flagDoc struct {
	State          string
	Variants       map[string]string
	DefaultVariant string
	Targeting      []any
	Metadata       map[string]any
}

func jsonVar(name string) map[string]any { return map[string]any{"var": name} }

func podPredicate(pod string) map[string]any {
	return map[string]any{"==": []any{jsonVar("pod"), pod}}
}

func podRef(pod string) map[string]any { return map[string]any{"$ref": podEvaluatorPrefix + pod} }

func shopsIn(ids []int64) map[string]any {
	return map[string]any{"in": []any{jsonVar("shop"), ids}}
}

// Render validates f and returns the flags file for it, byte-for-byte
// deterministic: the same state always renders the same bytes.
//
// Mode rules run shop overrides first, then pods (sorted by name), then
// the defaultVariant (the global mode). Kill switch rules run strongest
// first (redis_only, then redis; shops, then pods), then the
// defaultVariant (the global switch); when the global switch is
// redis_only a leading `true` rule keeps narrower redis rules from
// weakening it, while they stay in the file for when it is released.
// A flag without rules has no targeting, which is also the cheapest to
// evaluate. The version is written in both flags' metadata; a state
// without one (version 0) is refused, as Validate says.
func (f *Flags) Render() ([]byte, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	evaluators := map[string]any{}
	usePod := func(pod string) map[string]any {
		evaluators[podEvaluatorPrefix+pod] = podPredicate(pod)
		return podRef(pod)
	}

	var modeRules []any
	shopsByMode := map[authority.Mode][]int64{}
	for _, id := range sortedKeys(f.Shops) {
		if m := f.Shops[id].Mode; m != "" {
			shopsByMode[m] = append(shopsByMode[m], id)
		}
	}
	for _, m := range authority.Modes {
		if ids := shopsByMode[m]; len(ids) > 0 {
			modeRules = append(modeRules, shopsIn(ids), string(m))
		}
	}
	for _, name := range sortedKeys(f.Pods) {
		p := f.Pods[name]
		switch {
		case p.Ramp != nil:
			modeRules = append(modeRules, usePod(name), map[string]any{"fractional": []any{
				[]any{string(p.Ramp.Mode), p.Ramp.Percent},
				[]any{string(p.Mode), 100 - p.Ramp.Percent},
			}})
		case p.Mode != "":
			modeRules = append(modeRules, usePod(name), string(p.Mode))
		}
	}

	var killRules []any
	meta := map[string]any{}
	note := func(scope Scope, k KillSwitch) {
		if !k.Engaged() {
			return
		}
		meta[scope.String()+metaReason] = k.Reason
		if k.Actor != "" {
			meta[scope.String()+metaActor] = k.Actor
		}
		if !k.Since.IsZero() {
			meta[scope.String()+metaSince] = k.Since.UTC().Format(time.RFC3339)
		}
	}
	note(Global(), f.Kill)
	for _, k := range []authority.Kill{authority.KillRedisOnly, authority.KillRedis} {
		var ids []int64
		for _, id := range sortedKeys(f.Shops) {
			if s := f.Shops[id]; s.Kill.State == k {
				ids = append(ids, id)
				note(ShopScope(id), s.Kill)
			}
		}
		if len(ids) > 0 {
			killRules = append(killRules, shopsIn(ids), string(k))
		}
		for _, name := range sortedKeys(f.Pods) {
			if p := f.Pods[name]; p.Kill.State == k {
				killRules = append(killRules, usePod(name), string(k))
				note(PodScope(name), p.Kill)
			}
		}
	}
	if f.Kill.State == authority.KillRedisOnly && len(killRules) > 0 {
		killRules = append([]any{true, string(authority.KillRedisOnly)}, killRules...)
	}

	global := f.Kill.State
	if global == "" {
		global = authority.KillOff
	}
	meta[MetaVersion] = f.Version
	modeMeta := map[string]any{MetaVersion: f.Version}
	doc := fileDoc{
		Schema:  flagsSchema,
		Comment: flagsComment,
		Flags: map[string]flagDoc{
			FlagMode: {
				State: "ENABLED", Variants: variantsOf(authority.Modes), DefaultVariant: string(f.Mode),
				Targeting: ifRules(modeRules), Metadata: modeMeta,
			},
			FlagKillSwitch: {
				State: "ENABLED", Variants: variantsOf(authority.Kills), DefaultVariant: string(global),
				Targeting: ifRules(killRules), Metadata: meta,
			},
		},
	}
	if len(evaluators) > 0 {
		doc.Evaluators = evaluators
	}
	return doc.render()
}

// ifRules closes a rule list with an explicit null (no rule matched: the
// defaultVariant answers), or returns nil for no targeting at all.
func ifRules(rules []any) []any {
	if len(rules) == 0 {
		return nil
	}
	return append(rules, nil)
}

// render lays the document out for people: one member per line, each
// JsonLogic expression compact on one line, one targeting rule (condition
// and variant) per line, keys sorted. Byte-for-byte deterministic.
func (d fileDoc) render() ([]byte, error) {
	var firstErr error
	c := func(v any) string {
		s, err := compactJSON(v)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return s
	}
	var top []string
	top = append(top, `"$schema": `+c(d.Schema), `"$comment": `+c(d.Comment))
	if len(d.Evaluators) > 0 {
		var evs []string
		for _, name := range sortedKeys(d.Evaluators) {
			evs = append(evs, c(name)+": "+c(d.Evaluators[name]))
		}
		top = append(top, `"$evaluators": `+block(evs, 1, "{", "}"))
	}
	var flags []string
	for _, key := range sortedKeys(d.Flags) {
		fl := d.Flags[key]
		members := []string{
			`"state": ` + c(fl.State),
			`"variants": ` + c(fl.Variants),
			`"defaultVariant": ` + c(fl.DefaultVariant),
		}
		if len(fl.Targeting) > 0 {
			var rules []string
			for i := 0; i+1 < len(fl.Targeting); i += 2 {
				rules = append(rules, c(fl.Targeting[i])+", "+c(fl.Targeting[i+1]))
			}
			rules = append(rules, c(fl.Targeting[len(fl.Targeting)-1]))
			members = append(members, `"targeting": `+block(rules, 3, `{"if": [`, `]}`))
		}
		if len(fl.Metadata) > 0 {
			var meta []string
			for _, k := range sortedKeys(fl.Metadata) {
				meta = append(meta, c(k)+": "+c(fl.Metadata[k]))
			}
			members = append(members, `"metadata": `+block(meta, 3, "{", "}"))
		}
		flags = append(flags, c(key)+": "+block(members, 2, "{", "}"))
	}
	top = append(top, `"flags": `+block(flags, 1, "{", "}"))
	out := block(top, 0, "{", "}") + "\n"
	return []byte(out), firstErr
}

// block lays out members one per line at depth+1, between open and close.
func block(members []string, depth int, open, close string) string {
	if len(members) == 0 {
		return open + close
	}
	in := strings.Repeat("  ", depth+1)
	return open + "\n" + in + strings.Join(members, ",\n"+in) + "\n" + strings.Repeat("  ", depth) + close
}

// compactJSON marshals v on one line with a space after every ':' and ','
// outside strings, and without HTML escaping.
func compactJSON(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", fmt.Errorf("rollout: render flags: %w", err)
	}
	raw := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	out := make([]byte, 0, len(raw)+len(raw)/4)
	inString, escaped := false, false
	for _, ch := range raw {
		out = append(out, ch)
		switch {
		case inString && escaped:
			escaped = false
		case inString && ch == '\\':
			escaped = true
		case ch == '"':
			inString = !inString
		case !inString && (ch == ':' || ch == ','):
			out = append(out, ' ')
		}
	}
	return string(out), nil
}

func variantsOf[T ~string](values []T) map[string]string {
	m := make(map[string]string, len(values))
	for _, v := range values {
		m[string(v)] = string(v)
	}
	return m
}

// ParseFlags reads a flags file. It accepts what Render writes and the
// hand-written variations docs/flags.md describes (shop ids as numbers or
// decimal strings, pods inline or through $evaluators, an `in` list of
// pods); anything else (unknown variants, flags, keys or rule shapes,
// rules in an order whose meaning the model cannot keep) is refused with
// a *FlagsError naming the field. The version is read from both flags'
// metadata.version: it is required (CheckVersion), so a document without
// it (or with 0), one without reservoir's flags and an empty one are
// refused, and so are flags that disagree on it (a flag absent from the
// file has none). A *FlagsError found in the document says where it is
// (FlagsError.Line and Column): a JSON syntax error's position, or where
// the offending value starts.
func ParseFlags(data []byte) (*Flags, error) {
	f, err := parseFlags(data)
	if err != nil {
		return nil, locate(data, err)
	}
	return f, nil
}

func parseFlags(data []byte) (*Flags, error) {
	f := NewFlags()
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &FlagsError{Field: "file", Problem: "the document is empty"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var top any
	if err := dec.Decode(&top); err != nil {
		return nil, syntaxError(data, err)
	}
	if err := trailing(data, dec); err != nil {
		return nil, err
	}
	root, ok := top.(map[string]any)
	if !ok {
		return nil, &FlagsError{Field: "file", Problem: "want a JSON object"}
	}
	for _, k := range sortedKeys(root) {
		switch k {
		case "$schema", "$comment", "$evaluators", "flags":
		default:
			return nil, &FlagsError{Field: k, Problem: "unknown top-level key (the writer would drop it)"}
		}
	}
	p := parser{f: f, pods: map[string]string{}, versions: map[string]int64{}}
	if err := p.evaluators(root["$evaluators"]); err != nil {
		return nil, err
	}
	flags, ok := root["flags"].(map[string]any)
	if root["flags"] != nil && !ok {
		return nil, &FlagsError{Field: "flags", Problem: "want an object of flags"}
	}
	for _, key := range sortedKeys(flags) {
		var err error
		switch key {
		case FlagMode:
			err = p.modeFlag(flags[key])
		case FlagKillSwitch:
			err = p.killFlag(flags[key])
		default:
			err = &FlagsError{Field: fmt.Sprintf("flags[%q]", key), Problem: fmt.Sprintf("unknown flag (want %s or %s)", FlagMode, FlagKillSwitch)}
		}
		if err != nil {
			return nil, err
		}
	}
	// Replicas take the version from each flag's own evaluation, so flags
	// that disagree would give every decision two versions.
	if mv, kv := p.versions[FlagMode], p.versions[FlagKillSwitch]; mv != kv {
		return nil, &FlagsError{Field: fmt.Sprintf("flags[%q].metadata.version", FlagMode), Problem: fmt.Sprintf(
			"%s, but flags[%q].metadata.version is %s: both flags must carry the same version", versionText(mv), FlagKillSwitch, versionText(kv))}
	}
	f.Version = p.versions[FlagMode]
	if err := CheckVersion(f.Version, 0); err != nil {
		return nil, &FlagsError{Field: fmt.Sprintf("flags[%q].metadata.version", FlagMode), Problem: err.Error()}
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

func versionText(v int64) string {
	if v == 0 {
		return "0 (none)"
	}
	return strconv.FormatInt(v, 10)
}

// version reads a flag's metadata.version into p.versions and removes it
// from meta, which then holds the flag's other metadata.
func (p *parser) version(key string, meta map[string]any) error {
	v, ok := meta[MetaVersion]
	if !ok {
		return nil
	}
	delete(meta, MetaVersion)
	n, isNumber := v.(json.Number)
	ver, err := n.Int64()
	if !isNumber || err != nil || ver < 0 || ver > MaxVersion {
		return &FlagsError{Field: fmt.Sprintf("flags[%q].metadata.version", key),
			Problem: fmt.Sprintf("%v: want a whole number from 0 to 2^53, written as a JSON number (not a string)", v)}
	}
	p.versions[key] = ver
	return nil
}

type parser struct {
	f *Flags
	// pods maps $evaluators names to the pod they select.
	pods map[string]string
	// versions holds each flag's metadata.version (absent: 0).
	versions map[string]int64
}

func (p *parser) evaluators(v any) error {
	if v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return &FlagsError{Field: "$evaluators", Problem: "want an object"}
	}
	for _, name := range sortedKeys(m) {
		field := fmt.Sprintf("$evaluators[%q]", name)
		pod, ok := strings.CutPrefix(name, podEvaluatorPrefix)
		if !ok {
			return &FlagsError{Field: field, Problem: "unknown evaluator (the writer only knows pod:<name>)"}
		}
		got, ok := podEquals(m[name])
		if !ok || got != pod {
			return &FlagsError{Field: field, Problem: fmt.Sprintf(`want {"==": [{"var": "pod"}, %q]}`, pod)}
		}
		p.pods[name] = pod
	}
	return nil
}

// flag checks the parts both flags share and returns the default variant
// and the targeting's rule pairs.
func (p *parser) flag(key string, v any, known []string) (def string, rules [][2]any, meta map[string]any, err error) {
	field := fmt.Sprintf("flags[%q]", key)
	fl, ok := v.(map[string]any)
	if !ok {
		return "", nil, nil, &FlagsError{Field: field, Problem: "want an object"}
	}
	for _, k := range sortedKeys(fl) {
		switch k {
		case "state", "variants", "defaultVariant", "targeting", "metadata":
		default:
			return "", nil, nil, &FlagsError{Field: field + "." + k, Problem: "unknown key (the writer would drop it)"}
		}
	}
	if fl["state"] != "ENABLED" {
		return "", nil, nil, &FlagsError{Field: field + ".state", Problem: fmt.Sprintf("%v: only ENABLED is supported (a disabled flag answers the code default)", fl["state"])}
	}
	variants, ok := fl["variants"].(map[string]any)
	if !ok {
		return "", nil, nil, &FlagsError{Field: field + ".variants", Problem: "want an object"}
	}
	for _, name := range sortedKeys(variants) {
		if !slices.Contains(known, name) {
			return "", nil, nil, &FlagsError{Field: fmt.Sprintf("%s.variants[%q]", field, name), Problem: fmt.Sprintf("unknown variant (want %s)", strings.Join(known, ", "))}
		}
		if variants[name] != name {
			return "", nil, nil, &FlagsError{Field: fmt.Sprintf("%s.variants[%q]", field, name), Problem: fmt.Sprintf("value %v must equal the variant's name", variants[name])}
		}
	}
	def, ok = fl["defaultVariant"].(string)
	if !ok {
		return "", nil, nil, &FlagsError{Field: field + ".defaultVariant", Problem: "required: a variant name (a null default would make the code default answer)"}
	}
	if _, ok := variants[def]; !ok {
		return "", nil, nil, &FlagsError{Field: field + ".defaultVariant", Problem: fmt.Sprintf("%q is not one of the flag's variants", def)}
	}
	if rules, err = ruleList(field+".targeting", fl["targeting"]); err != nil {
		return "", nil, nil, err
	}
	for i, r := range rules {
		if s, ok := r[1].(string); ok {
			if _, ok := variants[s]; !ok {
				return "", nil, nil, &FlagsError{Field: fmt.Sprintf("%s.targeting.if[%d]", field, 2*i+1), Problem: fmt.Sprintf("%q is not one of the flag's variants", s)}
			}
		}
	}
	if m, ok := fl["metadata"]; ok {
		if meta, ok = m.(map[string]any); !ok {
			return "", nil, nil, &FlagsError{Field: field + ".metadata", Problem: "want an object"}
		}
	}
	return def, rules, meta, nil
}

// ruleList reads {"if": [cond, value, cond, value, ..., null]}.
func ruleList(field string, v any) ([][2]any, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, &FlagsError{Field: field, Problem: `want {"if": [...]} or nothing`}
	}
	if len(m) == 0 {
		return nil, nil
	}
	list, ok := m["if"].([]any)
	if !ok || len(m) != 1 {
		return nil, &FlagsError{Field: field, Problem: `want {"if": [condition, variant, ..., null]}`}
	}
	if len(list)%2 == 1 {
		if list[len(list)-1] != nil {
			return nil, &FlagsError{Field: fmt.Sprintf("%s.if[%d]", field, len(list)-1), Problem: "the last (else) entry must be null so the defaultVariant answers"}
		}
		list = list[:len(list)-1]
	}
	rules := make([][2]any, 0, len(list)/2)
	for i := 0; i < len(list); i += 2 {
		rules = append(rules, [2]any{list[i], list[i+1]})
	}
	return rules, nil
}

func (p *parser) modeFlag(v any) error {
	field := fmt.Sprintf("flags[%q].targeting", FlagMode)
	def, rules, meta, err := p.flag(FlagMode, v, names(authority.Modes))
	if err != nil {
		return err
	}
	if err := p.version(FlagMode, meta); err != nil {
		return err
	}
	if keys := sortedKeys(meta); len(keys) > 0 {
		return &FlagsError{Field: fmt.Sprintf("flags[%q].metadata[%q]", FlagMode, keys[0]), Problem: "not used by reservoir: only version belongs here (the writer would drop it)"}
	}
	p.f.Mode = authority.Mode(def)
	seenPod := false
	for i, r := range rules {
		at := fmt.Sprintf("%s.if[%d]", field, 2*i)
		if shops, ok, err := shopList(at, r[0]); ok || err != nil {
			if err != nil {
				return err
			}
			if seenPod {
				return &FlagsError{Field: at, Problem: "shop rules must come before pod rules (a pod rule would hide the shop override)"}
			}
			m, ok := r[1].(string)
			if !ok {
				return &FlagsError{Field: fmt.Sprintf("%s.if[%d]", field, 2*i+1), Problem: "a shop rule must answer a mode variant"}
			}
			for _, id := range shops {
				s := p.f.Shops[id]
				if s.Mode != "" {
					return &FlagsError{Field: at, Problem: fmt.Sprintf("shop %d appears in two rules", id)}
				}
				s.Mode = authority.Mode(m)
				p.f.Shops[id] = s
			}
			continue
		}
		pods, err := p.podList(at, r[0])
		if err != nil {
			return err
		}
		seenPod = true
		pf, err := modeValue(fmt.Sprintf("%s.if[%d]", field, 2*i+1), r[1])
		if err != nil {
			return err
		}
		for _, name := range pods {
			cur := p.f.Pods[name]
			if cur.Mode != "" {
				return &FlagsError{Field: at, Problem: fmt.Sprintf("pod %s appears in two rules", name)}
			}
			cur.Mode, cur.Ramp = pf.Mode, nil
			if pf.Ramp != nil {
				r := *pf.Ramp
				cur.Ramp = &r
			}
			p.f.Pods[name] = cur
		}
	}
	return nil
}

// modeValue reads what a pod rule answers: a mode, or a fractional ramp
// [[rampMode, percent], [podMode, 100-percent]].
func modeValue(field string, v any) (PodFlags, error) {
	if s, ok := v.(string); ok {
		return PodFlags{Mode: authority.Mode(s)}, nil
	}
	m, ok := v.(map[string]any)
	frac, okf := m["fractional"].([]any)
	if !ok || !okf || len(m) != 1 {
		return PodFlags{}, &FlagsError{Field: field, Problem: `want a mode variant or {"fractional": [[mode, percent], [mode, percent]]}`}
	}
	bad := &FlagsError{Field: field + ".fractional", Problem: "want exactly [[rampMode, percent], [podMode, 100 - percent]], bucketed by the targeting key"}
	if len(frac) != 2 {
		return PodFlags{}, bad
	}
	var modes [2]authority.Mode
	var weights [2]int64
	for i, b := range frac {
		pair, ok := b.([]any)
		if !ok || len(pair) != 2 {
			return PodFlags{}, bad
		}
		name, ok1 := pair[0].(string)
		w, ok2 := pair[1].(json.Number)
		if !ok1 || !ok2 {
			return PodFlags{}, bad
		}
		n, err := w.Int64()
		if err != nil {
			return PodFlags{}, bad
		}
		if !authority.Mode(name).Valid() {
			return PodFlags{}, &FlagsError{Field: fmt.Sprintf("%s.fractional[%d]", field, i), Problem: fmt.Sprintf("unknown mode %q (want %s)", name, modeList())}
		}
		modes[i], weights[i] = authority.Mode(name), n
	}
	if weights[0]+weights[1] != 100 {
		return PodFlags{}, &FlagsError{Field: field + ".fractional", Problem: fmt.Sprintf("weights %d + %d must add up to 100 (percentages)", weights[0], weights[1])}
	}
	return PodFlags{Mode: modes[1], Ramp: &Ramp{Mode: modes[0], Percent: int(weights[0])}}, nil
}

func (p *parser) killFlag(v any) error {
	field := fmt.Sprintf("flags[%q]", FlagKillSwitch)
	def, rules, meta, err := p.flag(FlagKillSwitch, v, names(authority.Kills))
	if err != nil {
		return err
	}
	if err := p.version(FlagKillSwitch, meta); err != nil {
		return err
	}
	global := authority.Kill(def)
	if global != authority.KillOff {
		p.f.Kill = KillSwitch{State: global}
	}
	guarded := false
	last := authority.KillRedisOnly
	for i, r := range rules {
		at := fmt.Sprintf("%s.targeting.if[%d]", field, 2*i)
		k, ok := r[1].(string)
		if !ok {
			return &FlagsError{Field: fmt.Sprintf("%s.targeting.if[%d]", field, 2*i+1), Problem: "a kill switch rule must answer a variant"}
		}
		state := authority.Kill(k)
		if r[0] == true {
			if i != 0 || state != authority.KillRedisOnly || global != authority.KillRedisOnly {
				return &FlagsError{Field: at, Problem: "a `true` rule may only come first, answer redis_only, with defaultVariant redis_only"}
			}
			guarded = true
			continue
		}
		if state == authority.KillOff {
			return &FlagsError{Field: at, Problem: "an off rule would weaken a wider kill switch; remove the scope from the rules instead"}
		}
		if state.Strength() > last.Strength() {
			return &FlagsError{Field: at, Problem: "redis_only rules must come before redis rules (the strongest switch wins)"}
		}
		if state == authority.KillRedis && global == authority.KillRedisOnly && !guarded {
			return &FlagsError{Field: at, Problem: "with defaultVariant redis_only, start the rules with `true, \"redis_only\"` or this redis rule weakens it"}
		}
		last = state
		if shops, ok, err := shopList(at, r[0]); ok || err != nil {
			if err != nil {
				return err
			}
			for _, id := range shops {
				s := p.f.Shops[id]
				if s.Kill.Engaged() {
					return &FlagsError{Field: at, Problem: fmt.Sprintf("shop %d appears in two rules", id)}
				}
				s.Kill = KillSwitch{State: state}
				p.f.Shops[id] = s
			}
			continue
		}
		pods, err := p.podList(at, r[0])
		if err != nil {
			return err
		}
		for _, name := range pods {
			pf := p.f.Pods[name]
			if pf.Kill.Engaged() {
				return &FlagsError{Field: at, Problem: fmt.Sprintf("pod %s appears in two rules", name)}
			}
			pf.Kill = KillSwitch{State: state}
			p.f.Pods[name] = pf
		}
	}
	if err := p.killMetadata(field+".metadata", meta); err != nil {
		return err
	}
	// A switch engaged by hand without a reason still parses, so the CLI
	// can release it in an incident; the placeholder says what happened.
	p.f.Kill = withReason(p.f.Kill)
	for name, pf := range p.f.Pods {
		pf.Kill = withReason(pf.Kill)
		p.f.Pods[name] = pf
	}
	for id, sf := range p.f.Shops {
		sf.Kill = withReason(sf.Kill)
		p.f.Shops[id] = sf
	}
	return nil
}

// noReason is the reason given to a switch found engaged without one.
const noReason = "engaged by hand; no reason recorded"

func withReason(k KillSwitch) KillSwitch {
	if k.Engaged() && strings.TrimSpace(k.Reason) == "" {
		k.Reason = noReason
	}
	return k
}

// killMetadata attaches "<scope>.reason|actor|since" entries to the
// engaged switches. Entries for a switch that is off (released by hand)
// are dropped.
func (p *parser) killMetadata(field string, meta map[string]any) error {
	for _, key := range sortedKeys(meta) {
		at := fmt.Sprintf("%s[%q]", field, key)
		val, ok := meta[key].(string)
		if !ok {
			return &FlagsError{Field: at, Problem: "want a string"}
		}
		var scopeText, kind string
		for _, suffix := range []string{metaReason, metaActor, metaSince} {
			if s, ok := strings.CutSuffix(key, suffix); ok {
				scopeText, kind = s, suffix
				break
			}
		}
		if kind == "" {
			return &FlagsError{Field: at, Problem: "unknown metadata key (want version, <scope>.reason, .actor or .since)"}
		}
		scope, err := ParseScope(scopeText)
		if err != nil {
			return &FlagsError{Field: at, Problem: err.Error()}
		}
		k := p.f.KillAt(scope)
		if !k.Engaged() {
			continue
		}
		switch kind {
		case metaReason:
			k.Reason = val
		case metaActor:
			k.Actor = val
		case metaSince:
			t, err := time.Parse(time.RFC3339, val)
			if err != nil {
				return &FlagsError{Field: at, Problem: "want an RFC 3339 time"}
			}
			k.Since = t.UTC()
		}
		p.f.setKill(scope, k)
	}
	return nil
}

// shopList reads {"in": [{"var": "shop"}, [ids]]}; ok is false when the
// condition is not a shop rule at all.
func shopList(field string, cond any) (ids []int64, ok bool, err error) {
	m, isMap := cond.(map[string]any)
	in, isIn := m["in"].([]any)
	if !isMap || !isIn || len(m) != 1 || len(in) != 2 || !isVar(in[0], "shop") {
		return nil, false, nil
	}
	list, isList := in[1].([]any)
	if !isList || len(list) == 0 {
		return nil, true, &FlagsError{Field: field, Problem: "want a non-empty list of shop ids"}
	}
	for _, v := range list {
		var text string
		switch x := v.(type) {
		case json.Number:
			text = x.String()
		case string:
			text = x
		}
		id, err := strconv.ParseInt(text, 10, 64)
		if err != nil || id <= 0 {
			return nil, true, &FlagsError{Field: field, Problem: fmt.Sprintf("%v is not a shop id (a positive integer)", v)}
		}
		ids = append(ids, id)
	}
	return ids, true, nil
}

// podList reads a pod condition: {"$ref": "pod:<name>"}, {"==": [{"var":
// "pod"}, name]} or {"in": [{"var": "pod"}, [names]]}.
func (p *parser) podList(field string, cond any) ([]string, error) {
	if m, ok := cond.(map[string]any); ok && len(m) == 1 {
		if ref, ok := m["$ref"].(string); ok {
			pod, ok := p.pods[ref]
			if !ok {
				return nil, &FlagsError{Field: field, Problem: fmt.Sprintf("$ref %q names no pod evaluator", ref)}
			}
			return []string{pod}, nil
		}
		if pod, ok := podEquals(m); ok {
			return []string{pod}, p.checkPod(field, pod)
		}
		if in, ok := m["in"].([]any); ok && len(in) == 2 && isVar(in[0], "pod") {
			list, _ := in[1].([]any)
			var pods []string
			for _, v := range list {
				pod, _ := v.(string)
				if err := p.checkPod(field, pod); err != nil {
					return nil, err
				}
				pods = append(pods, pod)
			}
			if len(pods) > 0 {
				return pods, nil
			}
		}
	}
	return nil, &FlagsError{Field: field, Problem: `not a reservoir rule: want a shop list {"in": [{"var": "shop"}, [ids]]} or a pod {"$ref": "pod:<name>"}`}
}

func (p *parser) checkPod(field, pod string) error {
	if !authority.ValidPodName(pod) {
		return &FlagsError{Field: field, Problem: fmt.Sprintf("pod name %q must match %s", pod, authority.PodName)}
	}
	return nil
}

func podEquals(v any) (string, bool) {
	m, ok := v.(map[string]any)
	eq, ok2 := m["=="].([]any)
	if !ok || !ok2 || len(m) != 1 || len(eq) != 2 || !isVar(eq[0], "pod") {
		return "", false
	}
	pod, ok := eq[1].(string)
	return pod, ok
}

func isVar(v any, name string) bool {
	m, ok := v.(map[string]any)
	return ok && len(m) == 1 && m["var"] == name
}

func names[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

// FlagsFile reads and writes the flags file at Path for the CLI and the
// admin API. Every write validates first, then replaces the file in one
// rename (a temp file in the same directory, fsynced, renamed over it), so
// a reader, flagd's watcher included, sees the old file or the new one and
// never a partial one; the file is never deleted, which would lose
// flagd's watch. Writers on one host serialise on "<Path>.lock".
type FlagsFile struct {
	// Path of the flags file. Required.
	Path string
}

// Read parses the flags file. A missing file is an error wrapping
// fs.ErrNotExist; a file ParseFlags refuses, an *InvalidFlagsError.
func (ff FlagsFile) Read() (*Flags, error) {
	data, err := os.ReadFile(ff.Path)
	if err != nil {
		return nil, fmt.Errorf("rollout: read flags file: %w", err)
	}
	f, err := ParseFlags(data)
	if err != nil {
		return nil, &InvalidFlagsError{Store: ff.String(), Document: data, Version: HighestVersion(data), Err: err}
	}
	return f, nil
}

// Write replaces the flags file with f, atomically, at f.Version as given.
// It refuses an invalid state (a state without a version included) and a
// version not above the file's, unless the file already holds exactly
// this state (then it writes nothing): every source refuses a document
// whose version does not grow (docs/flags.md), so such a write would only
// be refused by every replica. It is for writing a file from scratch;
// change the flags with Update, which numbers each change.
func (ff FlagsFile) Write(f *Flags) error {
	unlock, err := lockFlags(ff.Path)
	if err != nil {
		return err
	}
	defer unlock()
	_, err = ff.write(f)
	return err
}

// growsOver refuses writing data, f rendered, over store's document cur,
// at version curVersion, unless it is cur exactly (a write that changes
// nothing) or its version is above curVersion (CheckVersion, with cur as
// the document in force: the replicas would refuse anything else).
func growsOver(store FlagStore, cur, data []byte, curVersion int64, f *Flags) error {
	if bytes.Equal(cur, data) {
		return nil
	}
	if err := CheckVersion(f.Version, curVersion); err != nil {
		return fmt.Errorf("rollout: write the flags to the %s: %w", store, err)
	}
	return nil
}

// storedVersion is the version of a stored document: its own when it
// parses, else the highest it shows (HighestVersion).
func storedVersion(doc []byte) int64 {
	if f, err := ParseFlags(doc); err == nil {
		return f.Version
	}
	return HighestVersion(doc)
}

// Update applies change to the current state under the file lock and
// writes the result: a read-modify-write no other FlagsFile writer on the
// host can interleave with. A missing file starts from the Redis-safe
// state, and the first change is written at version 1. When
// change changed the state, the result is written at the file's version
// plus one (whatever Version change set); when it did not, nothing is
// written and the version stays. It returns the states before and after
// (equal when nothing changed) for the caller's audit trail; on error
// nothing is written.
func (ff FlagsFile) Update(change func(*Flags) error) (before, after *Flags, err error) {
	return ff.UpdateAt(-1, change)
}

// String implements FlagStore.
func (ff FlagsFile) String() string { return "flags file " + ff.Path }

// UpdateAt implements FlagStore: Update, refused with ErrFlagsChanged
// unless the file is at version (a negative version accepts any).
func (ff FlagsFile) UpdateAt(version int64, change func(*Flags) error) (before, after *Flags, err error) {
	unlock, err := lockFlags(ff.Path)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	before, err = ff.Read()
	if errors.Is(err, fs.ErrNotExist) {
		before, err = noDocument(), nil
	}
	if err != nil {
		return nil, nil, err
	}
	if version >= 0 && before.Version != version {
		return nil, nil, fmt.Errorf("%w: decided at version %d, %s is at version %d: read the flags again", ErrFlagsChanged, version, ff, before.Version)
	}
	if after, err = NextFlags(before, change); err != nil {
		return nil, nil, err
	}
	if _, err := ff.write(after); err != nil {
		return nil, nil, err
	}
	return before, after, nil
}

// NextFlags returns the state change makes of cur (which it leaves as it
// is), numbered: at cur's version when the state is the same, one more
// when it changed, and 1 when cur is no document yet (version 0). Update
// and the controller's dry run both use it, so a dry run shows the
// version a write would give.
func NextFlags(cur *Flags, change func(*Flags) error) (*Flags, error) {
	next := cur.Clone()
	if err := change(next); err != nil {
		return nil, err
	}
	if cur.Version == 0 {
		// No document yet (noDocument): whatever the change, this is
		// the first document, at version 1.
		next.Version = 1
		if err := next.Validate(); err != nil {
			return nil, err
		}
		return next, nil
	}
	next.Version = cur.Version
	was, err := cur.Render()
	if err != nil {
		return nil, err
	}
	now, err := next.Render()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(was, now) {
		next.Version++
	}
	return next, nil
}

func (ff FlagsFile) write(f *Flags) (changed bool, err error) {
	if ff.Path == "" {
		return false, errors.New("rollout: FlagsFile.Path is required")
	}
	data, err := f.Render()
	if err != nil {
		return false, err
	}
	perm := fs.FileMode(0o644)
	switch fi, err := os.Lstat(ff.Path); {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		return false, fmt.Errorf("rollout: flags file %s is a symlink (a mounted ConfigMap?): write its source instead", ff.Path)
	case err == nil:
		perm = fi.Mode().Perm()
		if cur, err := os.ReadFile(ff.Path); err == nil {
			if bytes.Equal(cur, data) {
				return false, nil
			}
			if err := growsOver(ff, cur, data, storedVersion(cur), f); err != nil {
				return false, err
			}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("rollout: flags file: %w", err)
	}
	if err := replaceFile(ff.Path, data, perm); err != nil {
		return false, fmt.Errorf("rollout: write flags file: %w", err)
	}
	return true, nil
}

// replaceFile writes data to a temp file next to path and renames it over
// path: readers see the old bytes or the new ones, and the inode a watcher
// follows is replaced the way flagd expects.
func replaceFile(path string, data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name()) // the temp file, never path
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(perm); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// Make the rename itself durable.
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	_ = d.Sync()
	return nil
}
