// Package reconcile compares the two stores of a pod shop by shop, like
// Vitess's VDiff: the ledger against the MySQL unit pools and holds, and
// against the Redis quantities and holds. The store that decides each shop
// (its fence; docs/ownership.md) is the truth: where MySQL decides, Redis
// must hold exactly what MySQL holds and its quantities must follow the
// ledger; where Redis decides, MySQL's shadow holds are only compared
// (noted, not drift: a handoff to MySQL copies Redis's state in). Changes
// still in MySQL's change feed are not drift either: the relay is on its
// way with them. Asked to, it repairs the side that does not decide, never
// the decider. It is resumable per shop and prints progress on long runs.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
)

// Pod is one pod's stores and mirror.
type Pod struct {
	Name   string
	MySQL  *mysqlstore.Store
	Redis  *redisstore.Store
	Mirror *mirror.Mirror
}

// Reconciler reconciles pods. It implements rollout.Reconciler.
type Reconciler struct {
	pods map[string]Pod
	// Progress receives one line per shop on long runs. Default: io.Discard.
	Progress io.Writer
}

var _ rollout.Reconciler = (*Reconciler)(nil)

// New returns a reconciler over pods.
func New(pods []Pod) *Reconciler {
	m := make(map[string]Pod, len(pods))
	for _, p := range pods {
		m[p.Name] = p
	}
	return &Reconciler{pods: m, Progress: io.Discard}
}

// Options qualify a run.
type Options struct {
	// Shops limits the run (default: every shop the pod's ledger knows).
	Shops []int64
	// Repair fixes what is found on the side that does not decide.
	Repair bool
	// Checkpoint, when set, is a file recording the last shop finished; a
	// run with Resume starts after it.
	Checkpoint string
	Resume     bool
}

// Finding is one difference.
type Finding struct {
	Shop int64 `json:"shop"`
	// Side is the store the finding is about: "mysql" or "redis".
	Side string `json:"side"`
	// Kind classifies it (mysqlstore.DriftKind, redisstore.DriftKind, or
	// one of this package's: fence, shadow_*).
	Kind string `json:"kind"`
	// Detail is the finding with its numbers.
	Detail string `json:"detail"`
	// Decider is the store that decides the shop (the truth).
	Decider reservation.Authority `json:"decider"`
	// Note is true for a finding that is not drift: an empty pool (the
	// next reserve refills it), a MySQL shadow hold that differs from
	// Redis in a shop Redis decides.
	Note bool `json:"note"`
	// Repaired is true when a repair fixed it.
	Repaired bool `json:"repaired"`
}

// Report is a run's result.
type Report struct {
	Pod      string         `json:"pod"`
	Shops    int            `json:"shops"`
	Findings []Finding      `json:"findings"`
	Counts   map[string]int `json:"counts"`
	Repaired int            `json:"repaired"`
	// Skipped counts shops before the checkpoint on a resumed run.
	Skipped int `json:"skipped"`
}

// Drift counts the findings that are drift (not notes).
func (rep Report) Drift() int {
	n := 0
	for _, f := range rep.Findings {
		if !f.Note {
			n++
		}
	}
	return n
}

// Clean reports whether a pod has no drift: where MySQL decides, Redis
// holds what MySQL holds (so a kill switch would lose nothing), and no
// pool or fence is wrong.
func (r *Reconciler) Clean(ctx context.Context, pod string) (bool, string, error) {
	rep, err := r.Run(ctx, pod, Options{})
	if err != nil {
		return false, "", err
	}
	return rep.Drift() == 0, rep.Summary(), nil
}

// Summary is the report in one line. Notes are counted apart from drift.
func (rep Report) Summary() string {
	drift, notes := 0, 0
	var kinds []string
	counted := map[string]bool{}
	for _, f := range rep.Findings {
		if f.Note {
			notes++
			continue
		}
		drift++
		if k := f.Side + ":" + f.Kind; !counted[k] {
			counted[k] = true
			kinds = append(kinds, k)
		}
	}
	note := ""
	if notes > 0 {
		note = fmt.Sprintf("; %d note(s)", notes)
	}
	if drift == 0 {
		return fmt.Sprintf("pod %s: %d shops, no drift%s", rep.Pod, rep.Shops, note)
	}
	slices.Sort(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, rep.Counts[k])
	}
	return fmt.Sprintf("pod %s: %d shops, %d drift finding(s) (%s), %d repaired%s", rep.Pod, rep.Shops, drift, strings.Join(parts, ", "), rep.Repaired, note)
}

// Run reconciles a pod.
func (r *Reconciler) Run(ctx context.Context, pod string, o Options) (Report, error) {
	p, ok := r.pods[pod]
	if !ok {
		return Report{}, fmt.Errorf("reconcile: no pod %q", pod)
	}
	shops := o.Shops
	if shops == nil {
		var err error
		if shops, err = p.MySQL.Shops(ctx); err != nil {
			return Report{}, err
		}
	}
	after := int64(0)
	if o.Resume && o.Checkpoint != "" {
		after = readCheckpoint(o.Checkpoint)
	}
	rep := Report{Pod: pod, Counts: map[string]int{}}
	start := time.Now()
	for i, shop := range shops {
		if shop <= after {
			rep.Skipped++
			continue
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		fs, decider, err := r.shop(ctx, p, shop, o.Repair)
		if err != nil {
			return rep, fmt.Errorf("reconcile: pod %s shop %d: %w", pod, shop, err)
		}
		rep.Shops++
		for _, f := range fs {
			rep.Counts[f.Side+":"+f.Kind]++
			if f.Repaired && !f.Note {
				rep.Repaired++
			}
		}
		rep.Findings = append(rep.Findings, fs...)
		if o.Checkpoint != "" {
			if err := writeCheckpoint(o.Checkpoint, shop); err != nil {
				return rep, err
			}
		}
		fmt.Fprintf(r.Progress, "reconcile %s: shop %d (%d/%d) decided by %s: %d finding(s), %s elapsed\n",
			pod, shop, i+1, len(shops), decider, len(fs), time.Since(start).Round(time.Millisecond))
	}
	return rep, nil
}

// shop reconciles one shop: find, then (asked to) repair, then find again
// to confirm.
func (r *Reconciler) shop(ctx context.Context, p Pod, shop int64, repair bool) ([]Finding, reservation.Authority, error) {
	found, decider, err := r.find(ctx, p, shop)
	if err != nil || !repair || len(found) == 0 {
		return found, decider, err
	}
	if err := r.repair(ctx, p, shop, decider, found); err != nil {
		return found, decider, err
	}
	after, _, err := r.find(ctx, p, shop)
	if err != nil {
		return found, decider, err
	}
	left := map[string]bool{}
	for _, f := range after {
		left[f.Side+f.Kind+f.Detail] = true
	}
	for i := range found {
		found[i].Repaired = !left[found[i].Side+found[i].Kind+found[i].Detail]
	}
	return found, decider, nil
}

// decider reads both fences: the one with the higher epoch names the
// decider; fences that disagree are a finding (a handoff in progress, or
// one Redis made by force).
func decider(mf, rf reservation.Fence) (reservation.Authority, string) {
	switch {
	case mf == rf:
		return mf.Decider, ""
	case rf.Epoch > mf.Epoch && rf.Decider == reservation.AuthorityRedis:
		return rf.Decider, fmt.Sprintf("Redis's fence %s is newer than MySQL's %s: Redis took the shop without MySQL (a forced handoff), or a handoff to Redis is draining", rf, mf)
	case rf.Epoch > mf.Epoch:
		return reservation.AuthorityMySQL, fmt.Sprintf("Redis's fence %s is newer than MySQL's %s: a handoff to MySQL has not finished", rf, mf)
	case mf.Epoch > rf.Epoch:
		return mf.Decider, fmt.Sprintf("MySQL's fence %s is newer than Redis's %s: the relay has not delivered it yet", mf, rf)
	}
	return mf.Decider, fmt.Sprintf("the fences disagree at one epoch: MySQL %s, Redis %s", mf, rf)
}

// find lists the shop's drift.
func (r *Reconciler) find(ctx context.Context, p Pod, shop int64) ([]Finding, reservation.Authority, error) {
	mf, err := p.MySQL.Fence(ctx, shop)
	if err != nil {
		return nil, "", err
	}
	rf, err := p.Redis.Fence(ctx, shop)
	if err != nil {
		return nil, "", err
	}
	dec, fenceProblem := decider(mf, rf)
	var out []Finding
	add := func(side, kind, detail string, note bool) {
		out = append(out, Finding{Shop: shop, Side: side, Kind: kind, Detail: detail, Decider: dec, Note: note})
	}
	pending, err := r.pending(ctx, p, shop)
	if err != nil {
		return nil, "", err
	}
	if fenceProblem != "" {
		add("redis", "fence", fenceProblem, pending.any)
	}
	pool, err := p.MySQL.Reconcile(ctx, shop)
	if err != nil {
		return nil, "", err
	}
	for _, d := range pool {
		add("mysql", string(d.Kind), d.String(), d.Kind == mysqlstore.DriftEmptyPool)
	}
	rd, err := p.Redis.Drift(ctx, &redisstore.DriftParams{Shop: shop})
	if err != nil {
		return nil, "", err
	}
	// A change still in the feed is on its way: the drift it explains is
	// not drift. The feed is read again after Drift, so a change that was
	// delivered (and left the feed) while Drift ran is not missed.
	later, err := r.pending(ctx, p, shop)
	if err != nil {
		return nil, "", err
	}
	pending.merge(later)
	for _, d := range rd {
		if pending.explains(d) {
			continue
		}
		add("redis", string(d.Kind), d.String(), false)
	}
	if dec == reservation.AuthorityRedis {
		shadow, err := shadowDrift(ctx, p, shop)
		if err != nil {
			return nil, "", err
		}
		for _, d := range shadow {
			add("mysql", d.kind, d.detail, true)
		}
	}
	return out, dec, nil
}

// feedState is what a shop has pending in MySQL's change feed.
type feedState struct {
	any    bool
	tokens map[string]bool
	// cells with a pending adjust, or touched by a pending state change
	cells map[[2]int64]bool
	all   bool // a fence change is pending: everything may move
}

func (r *Reconciler) pending(ctx context.Context, p Pod, shop int64) (feedState, error) {
	fs := feedState{tokens: map[string]bool{}, cells: map[[2]int64]bool{}}
	changes, err := p.MySQL.Pending(ctx, shop, 10000)
	if err != nil {
		return fs, err
	}
	for _, c := range changes {
		fs.any = true
		switch c.Kind {
		case reservation.ChangeState:
			fs.tokens[c.Token] = true
			for _, a := range c.Allocations {
				fs.cells[[2]int64{a.Item, a.Location}] = true
			}
		case reservation.ChangeAdjust:
			fs.cells[[2]int64{c.Item, c.Location}] = true
		case reservation.ChangeFence:
			fs.all = true
		}
	}
	return fs, nil
}

func (fs *feedState) merge(o feedState) {
	fs.any = fs.any || o.any
	fs.all = fs.all || o.all
	for t := range o.tokens {
		fs.tokens[t] = true
	}
	for c := range o.cells {
		fs.cells[c] = true
	}
}

func (fs feedState) explains(d redisstore.Drift) bool {
	if fs.all || (d.Token != "" && fs.tokens[d.Token]) {
		return true
	}
	if d.Item != 0 && fs.cells[[2]int64{d.Item, d.Location}] {
		return true
	}
	for _, a := range d.Allocations {
		if fs.cells[[2]int64{a.Item, a.Location}] {
			return true
		}
	}
	return false
}

type shadowFinding struct{ kind, detail string }

// shadowDrift compares MySQL's shadow holds with Redis's holds in a shop
// Redis decides.
func shadowDrift(ctx context.Context, p Pod, shop int64) ([]shadowFinding, error) {
	snap, err := p.Redis.Snapshot(ctx, shop)
	if err != nil {
		return nil, err
	}
	mine, err := p.MySQL.Holds(ctx, shop)
	if err != nil {
		return nil, err
	}
	want := map[string][]reservation.Allocation{}
	for _, h := range snap.Holds {
		want[h.Token] = sorted(h.Allocations)
	}
	var out []shadowFinding
	seen := map[string]bool{}
	for _, h := range mine {
		seen[h.Token] = true
		w, ok := want[h.Token]
		switch {
		case !ok:
			out = append(out, shadowFinding{"shadow_extra_hold", fmt.Sprintf("shop %d token %q: MySQL's shadow holds %v, Redis holds nothing", shop, h.Token, h.Allocations)})
		case !slices.Equal(w, sorted(h.Allocations)):
			out = append(out, shadowFinding{"shadow_hold_mismatch", fmt.Sprintf("shop %d token %q: MySQL's shadow holds %v, Redis %v", shop, h.Token, h.Allocations, w)})
		}
	}
	for _, h := range snap.Holds {
		if !seen[h.Token] {
			out = append(out, shadowFinding{"shadow_missing_hold", fmt.Sprintf("shop %d token %q: Redis holds %v, MySQL's shadow nothing", shop, h.Token, h.Allocations)})
		}
	}
	return out, nil
}

func sorted(as []reservation.Allocation) []reservation.Allocation {
	out := slices.Clone(as)
	reservation.SortAllocations(out)
	return out
}

// repair fixes the side that does not decide: Redis where MySQL decides
// (copy and catch-up, mirror.Resync), MySQL's shadow and pools where Redis
// decides (mysqlstore.Store.Repair from Redis's snapshot), and a MySQL
// fence behind Redis's (MySQL yields to the same epoch). The decider's
// reservations are never changed.
func (r *Reconciler) repair(ctx context.Context, p Pod, shop int64, dec reservation.Authority, found []Finding) error {
	var errs []error
	redisDrift, shadow, fence := false, false, false
	for _, f := range found {
		switch {
		case f.Kind == "fence":
			fence = true
		case f.Side == "redis":
			redisDrift = true
		case strings.HasPrefix(f.Kind, "shadow_"):
			shadow = true
		}
	}
	if fence {
		mf, err1 := p.MySQL.Fence(ctx, shop)
		rf, err2 := p.Redis.Fence(ctx, shop)
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		if rf.Decider == reservation.AuthorityRedis && rf.Epoch > mf.Epoch {
			if _, err := p.MySQL.Yield(ctx, shop, rf.Epoch); err != nil {
				errs = append(errs, err)
			}
		}
	}
	switch dec {
	case reservation.AuthorityMySQL:
		if redisDrift {
			if err := p.Mirror.Resync(ctx, shop); err != nil {
				errs = append(errs, err)
			}
		}
	case reservation.AuthorityRedis:
		if shadow {
			snap, err := p.Redis.Snapshot(ctx, shop)
			if err == nil {
				err = p.MySQL.Repair(ctx, &snap)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	if _, err := p.MySQL.TrimPools(ctx, shop); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func readCheckpoint(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

func writeCheckpoint(path string, shop int64) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(shop, 10)+"\n"), 0o644); err != nil {
		return fmt.Errorf("reconcile: checkpoint: %w", err)
	}
	return os.Rename(tmp, path)
}
