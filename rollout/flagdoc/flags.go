package flagdoc

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// The flag keys in the flags file (docs/flags.md). Their code defaults are
// the Redis-safe values: a file without them, or without any flag, routes
// every call to Redis.
const (
	// FlagMode is the string flag holding the mode: variants redis, shadow,
	// mysql, mysql_only; code default redis.
	FlagMode = "reservations.mode"
	// FlagKillSwitch is the string flag holding the kill switch: variants
	// off, redis, redis_only; code default off.
	FlagKillSwitch = "reservations.kill_switch"
)

// ScopeKind says how wide a scope is.
type ScopeKind string

const (
	// ScopeGlobal is every pod and shop.
	ScopeGlobal ScopeKind = "global"
	// ScopePod is every shop of one pod.
	ScopePod ScopeKind = "pod"
	// ScopeShop is one shop, on whatever pod serves it.
	ScopeShop ScopeKind = "shop"
)

// Scope is where a mode or kill switch applies: everything, a pod, or a
// shop. Its text form ("global", "pod:pod-b", "shop:1001") is what the CLI
// takes and what the flags file's metadata keys use.
type Scope struct {
	// Kind says which of the fields below applies.
	Kind ScopeKind
	// Pod names the pod when Kind is ScopePod.
	Pod string
	// Shop is the shop id when Kind is ScopeShop.
	Shop int64
}

// Global is the scope of every pod and shop.
func Global() Scope { return Scope{Kind: ScopeGlobal} }

// PodScope is the scope of every shop of pod.
func PodScope(pod string) Scope { return Scope{Kind: ScopePod, Pod: pod} }

// ShopScope is the scope of one shop.
func ShopScope(shop int64) Scope { return Scope{Kind: ScopeShop, Shop: shop} }

// String returns the scope's text form: "global", "pod:<name>" or "shop:<id>".
func (s Scope) String() string {
	switch s.Kind {
	case ScopePod:
		return "pod:" + s.Pod
	case ScopeShop:
		return "shop:" + strconv.FormatInt(s.Shop, 10)
	case ScopeGlobal:
		return "global"
	default:
		return fmt.Sprintf("scope(%q)", string(s.Kind))
	}
}

// Validate reports whether the scope names a valid pod or shop.
func (s Scope) Validate() error {
	switch s.Kind {
	case ScopeGlobal:
		return nil
	case ScopePod:
		if !authority.ValidPodName(s.Pod) {
			return fmt.Errorf("rollout: scope %q: pod name must match %s", s.String(), authority.PodName)
		}
		return nil
	case ScopeShop:
		if s.Shop <= 0 {
			return fmt.Errorf("rollout: scope %q: shop id must be positive", s.String())
		}
		return nil
	default:
		return fmt.Errorf("rollout: unknown scope kind %q (want global, pod or shop)", string(s.Kind))
	}
}

// ParseScope reads a scope's text form: "global", "pod:<name>" or
// "shop:<id>".
func ParseScope(text string) (Scope, error) {
	var s Scope
	switch kind, arg, _ := strings.Cut(text, ":"); kind {
	case "global":
		if arg != "" {
			return Scope{}, fmt.Errorf("rollout: scope %q: global takes no argument", text)
		}
		s = Global()
	case "pod":
		s = PodScope(arg)
	case "shop":
		id, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			return Scope{}, fmt.Errorf("rollout: scope %q: shop id must be a decimal integer", text)
		}
		s = ShopScope(id)
	default:
		return Scope{}, fmt.Errorf("rollout: scope %q: want global, pod:<name> or shop:<id>", text)
	}
	return s, s.Validate()
}

// Attribution says who made a change and why. The kill switch requires a
// reason; the reason and actor are kept in the flags file next to the
// switch, so whoever reads the file in an incident knows who pulled it.
type Attribution struct {
	// Actor is who made the change: a person, or "auto" for the controller.
	Actor string
	// Reason is why, in words an on-call engineer understands. Required for
	// kill switch changes.
	Reason string
	// At is when. Default: now. Kept to the second in the file.
	At time.Time
}

// KillSwitch is the kill switch of one scope.
type KillSwitch struct {
	// State is the switch's state; "" means off.
	State authority.Kill
	// Reason says why the switch was engaged; required when it is.
	Reason string
	// Actor is who engaged it.
	Actor string
	// Since is when it was engaged, to the second.
	Since time.Time
}

// Engaged reports whether the switch is on (redis or redis_only).
func (k KillSwitch) Engaged() bool {
	return k.State == authority.KillRedis || k.State == authority.KillRedisOnly
}

// Ramp is a percentage stage: Mode for Percent% of a pod's shops, the pod's
// own mode for the rest. A shop's bucket depends only on the shop id, so a
// shop keeps its side across pods, restarts and replicas, and raising the
// percentage only adds shops (those already in stay in).
type Ramp struct {
	// Mode is the mode of the shops in the ramp.
	Mode authority.Mode
	// Percent is the share of the pod's shops in the ramp, 1 to 99.
	Percent int
}

// PodFlags are one pod's settings.
type PodFlags struct {
	// Mode is the pod's mode; "" follows the global mode. Required with a Ramp
	// (it is the mode of the shops outside the ramp).
	Mode authority.Mode
	// Ramp is an optional percentage stage.
	Ramp *Ramp
	// Kill is the pod's kill switch.
	Kill KillSwitch
}

func (p PodFlags) empty() bool { return p.Mode == "" && p.Ramp == nil && !p.Kill.Engaged() }

// ShopFlags are one shop's settings; they override its pod's.
type ShopFlags struct {
	// Mode is the shop's mode; "" follows its pod.
	Mode authority.Mode
	// Kill is the shop's kill switch.
	Kill KillSwitch
}

func (s ShopFlags) empty() bool { return s.Mode == "" && !s.Kill.Engaged() }

// Flags is reservoir's flag state: what the flags file says, typed. Modes
// resolve from the most specific scope (shop, then pod, then global); the
// kill switch resolves to the strongest state of any scope that covers the
// call (redis_only over redis over off), and wins over every mode.
//
// Flags is a value to edit and write with FlagsFile; it is not safe for
// concurrent use. Render and ParseFlags convert it to and from flagd's JSON.
type Flags struct {
	// Version numbers this state: a number that only grows across every
	// change of the flags, written in the file's metadata of both flags
	// (metadata.version, docs/flags.md) and reported with every decision
	// made from them (Decision.Version), which the facade takes as the
	// epoch of a handoff between the stores (docs/ownership.md section 2).
	// FlagsFile.Update sets it, one more than the file's, on every change;
	// set it by hand only to write a file from scratch (NewFlags starts
	// at 1). It is required, from 1 to 2^53 (what flagd keeps exact):
	// Validate, and so Render and every write, refuse 0, and every source
	// refuses a document without a version, since decisions at version 0
	// could never hand a shop off.
	Version int64
	// Mode is the global mode. Required; NewFlags sets redis.
	Mode authority.Mode
	// Kill is the global kill switch.
	Kill KillSwitch
	// Pods holds per-pod settings by pod name.
	Pods map[string]PodFlags
	// Shops holds per-shop settings by shop id.
	Shops map[int64]ShopFlags
}

// NewFlags returns the Redis-safe state: mode redis everywhere, kill switch
// off, at version 1, the first version: what `reservoir rollout init`
// writes as the first document.
func NewFlags() *Flags {
	f := noDocument()
	f.Version = 1
	return f
}

// noDocument is what a store without a document holds, to change from: the
// Redis-safe state, not numbered (version 0), so the first change of it
// writes version 1 (NextFlags). It is never written as it is: Validate
// refuses version 0.
func noDocument() *Flags {
	return &Flags{Mode: authority.ModeRedis, Pods: map[string]PodFlags{}, Shops: map[int64]ShopFlags{}}
}

// Clone returns a deep copy of f.
func (f *Flags) Clone() *Flags {
	c := &Flags{Version: f.Version, Mode: f.Mode, Kill: f.Kill, Pods: make(map[string]PodFlags, len(f.Pods)), Shops: make(map[int64]ShopFlags, len(f.Shops))}
	for name, p := range f.Pods {
		if p.Ramp != nil {
			r := *p.Ramp
			p.Ramp = &r
		}
		c.Pods[name] = p
	}
	for id, s := range f.Shops {
		c.Shops[id] = s
	}
	return c
}

func (f *Flags) init() {
	if f.Pods == nil {
		f.Pods = map[string]PodFlags{}
	}
	if f.Shops == nil {
		f.Shops = map[int64]ShopFlags{}
	}
}

// SetMode sets the mode of a scope. For a pod or a shop, "" clears the
// override so the scope follows the wider one; setting a pod's mode ends
// its ramp. The global mode cannot be cleared.
func (f *Flags) SetMode(scope Scope, m authority.Mode) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	if m != "" && !m.Valid() {
		return &FlagsError{Field: fieldOf(scope, "mode"), Problem: fmt.Sprintf("unknown mode %q (want %s)", m, modeList())}
	}
	f.init()
	switch scope.Kind {
	case ScopeGlobal:
		if m == "" {
			return &FlagsError{Field: "mode", Problem: "the global mode cannot be cleared"}
		}
		f.Mode = m
	case ScopePod:
		p := f.Pods[scope.Pod]
		p.Mode, p.Ramp = m, nil
		f.putPod(scope.Pod, p)
	case ScopeShop:
		s := f.Shops[scope.Shop]
		s.Mode = m
		f.putShop(scope.Shop, s)
	}
	return nil
}

// SetRamp puts percent% of a pod's shops in mode m, the others in the pod's
// current mode (its own, or the global one, which becomes the pod's own).
// Percent 0 ends the ramp; 100 makes m the pod's mode.
func (f *Flags) SetRamp(pod string, m authority.Mode, percent int) error {
	scope := PodScope(pod)
	if err := scope.Validate(); err != nil {
		return err
	}
	field := fieldOf(scope, "ramp")
	if !m.Valid() {
		return &FlagsError{Field: field + ".mode", Problem: fmt.Sprintf("unknown mode %q (want %s)", m, modeList())}
	}
	if percent < 0 || percent > 100 {
		return &FlagsError{Field: field + ".percent", Problem: fmt.Sprintf("%d is not a percentage (0 to 100)", percent)}
	}
	f.init()
	p := f.Pods[pod]
	switch {
	case percent == 0:
		p.Ramp = nil
	case percent == 100:
		p.Mode, p.Ramp = m, nil
	default:
		if p.Mode == "" {
			p.Mode = f.Mode
		}
		if p.Mode == m {
			return &FlagsError{Field: field + ".mode", Problem: fmt.Sprintf("pod %s is already in mode %s", pod, m)}
		}
		p.Ramp = &Ramp{Mode: m, Percent: percent}
	}
	f.putPod(pod, p)
	return nil
}

// EngageKill turns the kill switch of a scope to k (redis or redis_only).
// A reason is required. Engaging an engaged switch replaces its state and
// attribution (e.g. redis_only back to redis once MySQL is healthy).
func (f *Flags) EngageKill(scope Scope, k authority.Kill, by Attribution) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	field := fieldOf(scope, "kill")
	if k != authority.KillRedis && k != authority.KillRedisOnly {
		return &FlagsError{Field: field, Problem: fmt.Sprintf("cannot engage %q (want redis or redis_only)", k)}
	}
	if strings.TrimSpace(by.Reason) == "" {
		return &FlagsError{Field: field + ".reason", Problem: "a reason is required to engage the kill switch"}
	}
	at := by.At
	if at.IsZero() {
		at = time.Now()
	}
	f.setKill(scope, KillSwitch{State: k, Reason: by.Reason, Actor: by.Actor, Since: at.UTC().Truncate(time.Second)})
	return nil
}

// ReleaseKill turns the kill switch of a scope off. A reason is required
// (the caller's audit trail keeps it); releasing a switch that is off does
// nothing. Switches of other scopes stay as they are.
func (f *Flags) ReleaseKill(scope Scope, by Attribution) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	if strings.TrimSpace(by.Reason) == "" {
		return &FlagsError{Field: fieldOf(scope, "kill.reason"), Problem: "a reason is required to release the kill switch"}
	}
	f.setKill(scope, KillSwitch{})
	return nil
}

// KillAt returns the kill switch set at exactly this scope (not the one
// that applies to it through a wider scope: see Resolve).
func (f *Flags) KillAt(scope Scope) KillSwitch {
	switch scope.Kind {
	case ScopePod:
		return f.Pods[scope.Pod].Kill
	case ScopeShop:
		return f.Shops[scope.Shop].Kill
	default:
		return f.Kill
	}
}

func (f *Flags) setKill(scope Scope, k KillSwitch) {
	f.init()
	switch scope.Kind {
	case ScopeGlobal:
		f.Kill = k
	case ScopePod:
		p := f.Pods[scope.Pod]
		p.Kill = k
		f.putPod(scope.Pod, p)
	case ScopeShop:
		s := f.Shops[scope.Shop]
		s.Kill = k
		f.putShop(scope.Shop, s)
	}
}

func (f *Flags) putPod(name string, p PodFlags) {
	if p.empty() {
		delete(f.Pods, name)
		return
	}
	f.Pods[name] = p
}

func (f *Flags) putShop(id int64, s ShopFlags) {
	if s.empty() {
		delete(f.Shops, id)
		return
	}
	f.Shops[id] = s
}

// FlagsError reports an invalid value in a flag state or a flags file.
// Field names it the way the model does, e.g. `pods["pod-b"].ramp.percent`
// or `flags["reservations.mode"].variants`.
type FlagsError struct {
	// Field names the offending value.
	Field string
	// Problem says what is wrong with it and what is expected.
	Problem string
	// Line and Column say where in the document the problem is (1-based,
	// columns in characters), when it was read from one (ParseFlags, the
	// sources' checks): a JSON syntax error's position, or where the
	// value Field names starts. 0 when unknown.
	Line, Column int
}

// Error implements error.
func (e *FlagsError) Error() string {
	where := ""
	if e.Line > 0 {
		where = fmt.Sprintf(" (line %d, column %d)", e.Line, e.Column)
	}
	return "rollout: flags: " + e.Field + where + ": " + e.Problem
}

// Validate checks the whole state and returns every problem found (joined
// *FlagsError values, in a stable order), or nil.
func (f *Flags) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FlagsError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	checkKill := func(field string, k KillSwitch) {
		if k.State != "" && !k.State.Valid() {
			bad(field+".state", "unknown kill switch state %q (want off, redis or redis_only)", k.State)
		}
		if k.Engaged() && strings.TrimSpace(k.Reason) == "" {
			bad(field+".reason", "required when the kill switch is engaged")
		}
	}
	if f.Version < 0 || f.Version > MaxVersion {
		bad("version", "%d is out of range 1 to 2^53", f.Version)
	} else if err := CheckVersion(f.Version, 0); err != nil {
		bad("version", "%v", err)
	}
	if !f.Mode.Valid() {
		bad("mode", "unknown mode %q (want %s)", f.Mode, modeList())
	}
	checkKill("kill", f.Kill)
	for _, name := range sortedKeys(f.Pods) {
		p := f.Pods[name]
		field := fmt.Sprintf("pods[%q]", name)
		if !authority.ValidPodName(name) {
			bad(field, "pod name must match %s", authority.PodName)
		}
		if p.Mode != "" && !p.Mode.Valid() {
			bad(field+".mode", "unknown mode %q (want %s)", p.Mode, modeList())
		}
		if r := p.Ramp; r != nil {
			if !r.Mode.Valid() {
				bad(field+".ramp.mode", "unknown mode %q (want %s)", r.Mode, modeList())
			}
			if r.Percent < 1 || r.Percent > 99 {
				bad(field+".ramp.percent", "%d is out of range 1 to 99 (use the pod's mode for 0 or 100)", r.Percent)
			}
			if p.Mode == "" {
				bad(field+".mode", "required with a ramp: it is the mode of the shops outside the ramp")
			} else if p.Mode == r.Mode {
				bad(field+".ramp.mode", "equals the pod's mode %s", p.Mode)
			}
		}
		checkKill(field+".kill", p.Kill)
	}
	for _, id := range sortedKeys(f.Shops) {
		s := f.Shops[id]
		field := fmt.Sprintf("shops[%d]", id)
		if id <= 0 {
			bad(field, "shop id must be positive")
		}
		if s.Mode != "" && !s.Mode.Valid() {
			bad(field+".mode", "unknown mode %q (want %s)", s.Mode, modeList())
		}
		checkKill(field+".kill", s.Kill)
	}
	return errors.Join(errs...)
}

// fieldOf names a field of a scope the way FlagsError does: "mode",
// `pods["pod-b"].mode`, "shops[1001].kill".
func fieldOf(s Scope, name string) string {
	switch s.Kind {
	case ScopePod:
		return fmt.Sprintf("pods[%q].%s", s.Pod, name)
	case ScopeShop:
		return fmt.Sprintf("shops[%d].%s", s.Shop, name)
	default:
		return name
	}
}

func modeList() string {
	names := make([]string, len(authority.Modes))
	for i, m := range authority.Modes {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}

func sortedKeys[K int64 | string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
