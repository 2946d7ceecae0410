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
	"maps"
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

// Pod is one pod's stores and mirror. A pod without a Mirror can be
// compared, not repaired.
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

	// where is what the finding is about (a token, an item x location,
	// or nothing for the fence), for telling after a repair whether it is
	// still there: its Detail carries numbers that may have moved.
	where string
}

// id names a finding without its numbers.
func (f Finding) id() string { return f.Side + "|" + f.Kind + "|" + f.where }

// Report is a run's result.
type Report struct {
	Pod      string    `json:"pod"`
	Shops    int       `json:"shops"`
	Findings []Finding `json:"findings"`
	// Counts are the findings per "side:kind", notes included.
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
	notes := 0
	drift := map[string]int{} // side:kind -> drift findings (Counts also counts notes)
	for _, f := range rep.Findings {
		if f.Note {
			notes++
			continue
		}
		drift[f.Side+":"+f.Kind]++
	}
	note := ""
	if notes > 0 {
		note = fmt.Sprintf("; %d note(s)", notes)
	}
	if len(drift) == 0 {
		return fmt.Sprintf("pod %s: %d shops, no drift%s", rep.Pod, rep.Shops, note)
	}
	kinds := slices.Sorted(maps.Keys(drift))
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, drift[k])
	}
	return fmt.Sprintf("pod %s: %d shops, %d drift finding(s) (%s), %d repaired%s", rep.Pod, rep.Shops, rep.Drift(), strings.Join(parts, ", "), rep.Repaired, note)
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
	found, decider, err := r.stable(ctx, p, shop)
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
		left[f.id()] = true
	}
	for i := range found {
		found[i].Repaired = !left[found[i].id()]
	}
	return found, decider, nil
}

// recheckAfter is how long stable waits before looking at a shop's drift
// again: longer than a change takes to travel from MySQL's commit through
// the relay into Redis (the relay's poll is 20ms).
const recheckAfter = 250 * time.Millisecond

// stable finds a shop's drift, and when there is some, looks again after
// recheckAfter and keeps only the findings both looks agree on. A change
// committed in MySQL and relayed into Redis between the reads of one look
// (the holds of one store, then the other's) is in neither of its reads of
// the feed, and shows as drift that the next look no longer has: under
// live traffic, without this, a kill switch over mysql_only would be
// refused now and then for nothing.
func (r *Reconciler) stable(ctx context.Context, p Pod, shop int64) ([]Finding, reservation.Authority, error) {
	found, decider, err := r.find(ctx, p, shop)
	if err != nil || !hasDrift(found) {
		return found, decider, err
	}
	select {
	case <-ctx.Done():
		return nil, "", ctx.Err()
	case <-time.After(recheckAfter):
	}
	again, decider2, err := r.find(ctx, p, shop)
	if err != nil {
		return nil, "", err
	}
	seen := map[string]bool{}
	for _, f := range found {
		seen[f.id()] = true
	}
	var out []Finding
	for _, f := range again {
		if f.Note || seen[f.id()] {
			out = append(out, f)
		}
	}
	return out, decider2, nil
}

func hasDrift(fs []Finding) bool {
	for _, f := range fs {
		if !f.Note {
			return true
		}
	}
	return false
}

// fenceState is what the two fences of a shop say together.
type fenceState struct {
	// decider is the store that decides (the truth for the comparison).
	decider reservation.Authority
	// problem describes fences that disagree ("" when they agree).
	problem string
	// relaying is set when the disagreement is a handoff to Redis whose
	// fence change is on its way through the feed (at least epoch
	// relaying): not drift while that change is pending.
	relaying int64
}

// fences reads both fences: the one with the higher epoch names the
// decider; fences that disagree are a finding. Only Force sets Redis's
// fence to Redis above MySQL's (a handoff to Redis moves MySQL's fence
// first, in the transaction that records the fence change for the relay),
// so Redis ahead naming itself is a forced handoff; Redis ahead naming
// MySQL is a handoff to MySQL that has not finished (neither store
// decides until it does); MySQL ahead is a fence change the relay has not
// delivered, or lost.
func fences(mf, rf reservation.Fence) fenceState {
	switch {
	case mf == rf:
		return fenceState{decider: mf.Decider}
	case rf.Epoch > mf.Epoch && rf.Decider == reservation.AuthorityRedis:
		return fenceState{decider: rf.Decider, problem: fmt.Sprintf("Redis's fence %s is newer than MySQL's %s: Redis took the shop without MySQL (a forced handoff); what the feed held for it then reached Redis late or not at all", rf, mf)}
	case rf.Epoch > mf.Epoch:
		return fenceState{decider: reservation.AuthorityMySQL, problem: fmt.Sprintf("Redis's fence %s is newer than MySQL's %s: a handoff to MySQL has not finished, and neither store decides the shop", rf, mf)}
	case mf.Epoch > rf.Epoch:
		return fenceState{decider: mf.Decider, relaying: mf.Epoch,
			problem: fmt.Sprintf("MySQL's fence %s is newer than Redis's %s: the relay has not delivered it, or Redis lost it", mf, rf)}
	}
	return fenceState{decider: mf.Decider, problem: fmt.Sprintf("the fences disagree at one epoch: MySQL %s, Redis %s", mf, rf)}
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
	fc := fences(mf, rf)
	dec := fc.decider
	var out []Finding
	add := func(side, kind, where, detail string, note bool) {
		out = append(out, Finding{Shop: shop, Side: side, Kind: kind, Detail: detail, Decider: dec, Note: note, where: where})
	}
	pending, err := r.pending(ctx, p, shop)
	if err != nil {
		return nil, "", err
	}
	pool, err := p.MySQL.Reconcile(ctx, shop)
	if err != nil {
		return nil, "", err
	}
	for _, d := range pool {
		add("mysql", string(d.Kind), cellOf(d.Item, d.Location), d.String(), d.Kind == mysqlstore.DriftEmptyPool)
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
	if fc.problem != "" {
		// Only a fence change still in the feed explains fences that
		// disagree; other pending changes of the shop do not (after a
		// forced handoff they are what Redis missed).
		add("redis", "fence", "", fc.problem, fc.relaying > 0 && pending.fence >= fc.relaying)
	}
	for _, d := range rd {
		if pending.explains(d) {
			continue
		}
		where := "token " + d.Token
		if d.Token == "" {
			where = cellOf(d.Item, d.Location)
		}
		add("redis", string(d.Kind), where, d.String(), false)
	}
	if dec == reservation.AuthorityRedis {
		shadow, err := shadowDrift(ctx, p, shop)
		if err != nil {
			return nil, "", err
		}
		for _, d := range shadow {
			add("mysql", d.kind, "token "+d.token, d.detail, true)
		}
	}
	return out, dec, nil
}

// feedState is what a shop has pending in MySQL's change feed.
type feedState struct {
	tokens map[string]bool
	// cells with a pending adjust, or touched by a pending state change
	cells map[[2]int64]bool
	all   bool // a fence change is pending: everything may move
	// fence is the highest epoch of a pending fence change (0: none).
	fence int64
}

func (r *Reconciler) pending(ctx context.Context, p Pod, shop int64) (feedState, error) {
	fs := feedState{tokens: map[string]bool{}, cells: map[[2]int64]bool{}}
	changes, err := p.MySQL.Pending(ctx, shop, 10000)
	if err != nil {
		return fs, err
	}
	for _, c := range changes {
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
			fs.fence = max(fs.fence, c.Fence.Epoch)
		}
	}
	return fs, nil
}

func (fs *feedState) merge(o feedState) {
	fs.all = fs.all || o.all
	fs.fence = max(fs.fence, o.fence)
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

type shadowFinding struct{ kind, token, detail string }

func cellOf(item, location int64) string { return fmt.Sprintf("item %d location %d", item, location) }

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
		want[h.Token] = reservation.SortedAllocations(h.Allocations)
	}
	var out []shadowFinding
	seen := map[string]bool{}
	for _, h := range mine {
		seen[h.Token] = true
		w, ok := want[h.Token]
		switch {
		case !ok:
			out = append(out, shadowFinding{"shadow_extra_hold", h.Token, fmt.Sprintf("shop %d token %q: MySQL's shadow holds %v, Redis holds nothing", shop, h.Token, h.Allocations)})
		case !slices.Equal(w, reservation.SortedAllocations(h.Allocations)):
			out = append(out, shadowFinding{"shadow_hold_mismatch", h.Token, fmt.Sprintf("shop %d token %q: MySQL's shadow holds %v, Redis %v", shop, h.Token, h.Allocations, w)})
		}
	}
	for _, h := range snap.Holds {
		if !seen[h.Token] {
			out = append(out, shadowFinding{"shadow_missing_hold", h.Token, fmt.Sprintf("shop %d token %q: Redis holds %v, MySQL's shadow nothing", shop, h.Token, h.Allocations)})
		}
	}
	return out, nil
}

// repair fixes the side that does not decide: Redis where MySQL decides
// (copy and catch-up, mirror.Resync), MySQL's shadow and pools where Redis
// decides (mysqlstore.Store.Repair from Redis's snapshot). Fences that
// disagree are settled first: after a forced handoff MySQL yields to the
// epoch Redis took the shop at; a handoff to MySQL that did not finish is
// finished (it is idempotent: any replica may finish it); a Redis fence
// behind a MySQL that decides (Redis lost it) is rewritten by the copy. A
// fence change still on its way is left to the relay. The decider's
// reservations are never changed.
func (r *Reconciler) repair(ctx context.Context, p Pod, shop int64, dec reservation.Authority, found []Finding) error {
	if p.Mirror == nil {
		return fmt.Errorf("pod %s has no mirror: nothing can repair it (reconcile.Pod.Mirror)", p.Name)
	}
	var errs []error
	redisDrift, shadow, fence := false, false, false
	for _, f := range found {
		switch {
		case f.Kind == "fence":
			fence = fence || !f.Note
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
		switch {
		case rf.Epoch > mf.Epoch && rf.Decider == reservation.AuthorityRedis:
			if _, err := p.MySQL.Yield(ctx, shop, rf.Epoch); err != nil {
				errs = append(errs, err)
			}
		case rf.Epoch > mf.Epoch:
			if _, err := p.Mirror.Handoff(ctx, shop, reservation.AuthorityMySQL, rf.Epoch, false); err != nil {
				errs = append(errs, err)
			}
		case mf.Epoch > rf.Epoch && mf.Decider == reservation.AuthorityMySQL:
			redisDrift = true
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
