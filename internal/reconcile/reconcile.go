// Package reconcile compares the two stores of a pod shop by shop, like
// Vitess's VDiff: the ledger against the MySQL unit pools and holds, and
// against the Redis quantities and holds. The store that decides each shop
// (its fence; docs/ownership.md) is the truth: where MySQL decides, Redis
// must hold exactly what MySQL holds and its quantities must follow the
// ledger; where Redis decides, MySQL's shadow holds are only compared
// (notes, not drift: a handoff to MySQL copies Redis's state in), and in
// redis mode, where MySQL is not written, not compared at all.
//
// Each look holds the shop still in MySQL for a few milliseconds
// (MySQL.FreezeShop) and delivers the changes already in the
// feed first, so under live traffic it compares two stores that do not
// move: what it finds is there. Notes (an empty pool, a shadow that
// differs) are kept apart from drift and never make a pod unclean. Asked
// to, it repairs the side that does not decide, never the decider, and
// looks again to say what the repair fixed. It is resumable per shop and
// prints progress on long runs.
//
// It reads and repairs the stores through the roles it declares (MySQL,
// Redis, Repairer), which the stores and the mirror satisfy, and imports
// neither store.
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

	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// MySQL is what a reconciliation reads and repairs of a pod's MySQL store
// (*mysqlstore.Store): the ledger against the pools and holds, the feed
// that explains a difference on its way, and the shadow's repairs where
// Redis decides.
type MySQL interface {
	// Shops lists the shops the ledger knows: a run's default.
	Shops(ctx context.Context) ([]int64, error)
	// FreezeShop runs fn with no decision, deduct or adjust of the shop
	// committing meanwhile: a look compares two stores that do not move.
	FreezeShop(ctx context.Context, shop int64, fn func(ctx context.Context) error) error
	// Fence returns the shop's fence in MySQL.
	Fence(ctx context.Context, shop int64) (reservation.Fence, error)
	// Reconcile compares the shop's pools and holds with the ledger.
	Reconcile(ctx context.Context, shop int64) ([]reservation.PoolDrift, error)
	// Pending returns the shop's changes still in the feed: drift they
	// explain is on its way, not drift.
	Pending(ctx context.Context, shop int64, limit int) ([]reservation.Change, error)
	// Holds lists the shop's holds in MySQL: the shadow's, compared with
	// Redis's where Redis decides.
	Holds(ctx context.Context, shop int64) ([]reservation.Hold, error)
	// Yield moves MySQL's fence off the shop at epoch: a forced handoff's
	// fence settled.
	Yield(ctx context.Context, shop, epoch int64) (reservation.Fence, error)
	// Repair makes MySQL's shadow of a shop Redis decides exactly snap
	// (Redis's), under the fence lock.
	Repair(ctx context.Context, snap *reservation.Snapshot) error
	// TrimPools brings every pool of the shop back within the ledger and
	// the pool cap, and returns how many it trimmed.
	TrimPools(ctx context.Context, shop int64) (int, error)
}

// Redis is what a reconciliation reads of a pod's Redis store
// (*redisstore.Store). Redis is repaired only through the mirror
// (Repairer.Resync), never written here.
type Redis interface {
	// Fence returns the shop's fence in Redis.
	Fence(ctx context.Context, shop int64) (reservation.Fence, error)
	// Drift compares the shop's Redis state with the ledger and the
	// decider's holds.
	Drift(ctx context.Context, p *reservation.DriftParams) ([]reservation.RedisDrift, error)
	// Snapshot reads the shop's fence, holds and tombstones in Redis.
	Snapshot(ctx context.Context, shop int64) (reservation.Snapshot, error)
}

// Repairer is what a repair asks of the pod's handoff machinery
// (*mirror.Mirror): the only way a reconciliation writes Redis or moves a
// fence to MySQL, so that a repair obeys the rules the handoffs do.
type Repairer interface {
	// Flush delivers the shop's pending changes to Redis now.
	Flush(ctx context.Context, shop int64) error
	// HandoffWait finishes a handoff of the shop (it is idempotent: any
	// caller may finish it).
	HandoffWait(ctx context.Context, shop int64, to reservation.Authority, epoch int64, force bool) (reservation.Fence, error)
	// Resync rebuilds the shop in Redis from MySQL, which decides it.
	Resync(ctx context.Context, shop int64) error
}

// Pod is one pod's stores and mirror. A pod without a Mirror (nil) can be
// compared, not repaired.
type Pod struct {
	Name   string
	MySQL  MySQL
	Redis  Redis
	Mirror Repairer
}

// Reconciler reconciles pods. It implements rollout.Reconciler (the
// controller's check before a kill switch; roles_test.go holds it to it),
// without importing the controller.
type Reconciler struct {
	pods map[string]Pod
	// Progress receives one line per shop on long runs. Default: io.Discard.
	Progress io.Writer
	// Modes, when set, says each shop's mode: where Redis decides a shop
	// in redis mode (the kill switch redis_only included), MySQL's
	// reservation tables are not written, so its pools and shadow holds
	// are neither compared nor repaired (Report.MySQLNotWritten counts
	// those shops); Redis is still checked against the ledger. A shop
	// whose flags cannot be read is compared in full. Default: nil, every
	// shop is compared in full.
	Modes authority.ModeSource

	// beforeRepair and afterRepair, when set (tests only), run between a
	// shop's look and its repair, and between the repair and the look
	// that checks it: where operations in flight land.
	beforeRepair, afterRepair func(shop int64)
	// duringLook, when set (tests only), runs in a look with the shop held
	// still, with the look's context.
	duringLook func(ctx context.Context)
}

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

// The kinds of finding this package adds to the stores' own
// (reservation.DriftKind). Every kind names one
// thing on one side: a kind never needs its side to be told apart.
const (
	// KindFence: the two fences of a shop disagree (Side "redis").
	KindFence = "fence"
	// KindShadowExtraHold: MySQL's shadow holds a token Redis, deciding,
	// does not (a note).
	KindShadowExtraHold = "shadow_extra_hold"
	// KindShadowMissingHold: Redis, deciding, holds a token MySQL's
	// shadow does not (a note).
	KindShadowMissingHold = "shadow_missing_hold"
	// KindShadowHoldMismatch: both hold the token at different
	// allocations; Redis decides (a note).
	KindShadowHoldMismatch = "shadow_hold_mismatch"
)

// Finding is one difference: drift (Report.Findings) or a note
// (Report.Notes).
type Finding struct {
	Shop int64 `json:"shop"`
	// Side is the store the finding is about: "mysql" or "redis".
	Side string `json:"side"`
	// Kind classifies it, one name everywhere (summary, JSON, each line):
	// a reservation.DriftKind, or one of this package's Kind constants.
	Kind string `json:"kind"`
	// Where is what it is about: `token "t"`, `item I loc L`, or "" for
	// the shop's fence.
	Where string `json:"where"`
	// Detail is the finding with its numbers; allocations read
	// "item I loc L ×Q".
	Detail string `json:"detail"`
	// Decider is the store that decides the shop (the truth).
	Decider reservation.Authority `json:"decider"`
	// Note is true for a finding that is not drift: an empty pool (the
	// next reserve refills it), a MySQL shadow hold that differs from
	// Redis in a shop Redis decides, a handoff to Redis on its way.
	Note bool `json:"note"`
	// Repaired is true when a repair fixed it: the look after the repair
	// no longer finds it.
	Repaired bool `json:"repaired"`
}

// id names a finding without its numbers, which may move while the
// finding stays.
func (f Finding) id() string { return f.Side + "|" + f.Kind + "|" + f.Where }

// place names what a finding is about (side and where) without its kind,
// which may move while the drift stays: a quantity Redis lost is missing,
// then wrong once a delivery recreates its field from nothing.
func (f Finding) place() string { return f.Side + "|" + f.Where }

// String is the finding on one line: shop, side, kind, where, detail.
func (f Finding) String() string {
	s := fmt.Sprintf("shop %d %s %s", f.Shop, f.Side, f.Kind)
	if f.Where != "" {
		s += " " + f.Where
	}
	s += ": " + f.Detail
	if f.Repaired {
		s += " (repaired)"
	}
	return s
}

// Report is a run's result.
type Report struct {
	Pod   string `json:"pod"`
	Shops int    `json:"shops"`
	// Findings are the drift found, repaired or not.
	Findings []Finding `json:"findings"`
	// Notes are what was found that is not drift (Finding.Note).
	Notes []Finding `json:"notes"`
	// Counts are the drift findings per kind.
	Counts map[string]int `json:"counts"`
	// NoteCounts are the notes per kind.
	NoteCounts map[string]int `json:"note_counts"`
	// Repaired counts the drift findings a repair fixed.
	Repaired int `json:"repaired"`
	// Left counts the drift findings not repaired: the run's verdict.
	Left int `json:"left"`
	// MySQLNotWritten counts the shops in redis mode (Reconciler.Modes),
	// whose MySQL side was not compared: MySQL is not written there.
	MySQLNotWritten int `json:"mysql_not_written"`
	// Skipped counts shops before the checkpoint on a resumed run.
	Skipped int `json:"skipped"`
	// Repair is true for a run that repaired (Options.Repair): its
	// Repaired flags say what the look after the repair no longer finds.
	Repair bool `json:"repair"`
}

// Drift counts the drift findings, repaired or not.
func (rep Report) Drift() int { return len(rep.Findings) }

// Clean reports whether a pod has no drift: where MySQL decides, Redis
// holds what MySQL holds (so a kill switch would lose nothing), and no
// pool or fence is wrong. Notes do not count.
func (r *Reconciler) Clean(ctx context.Context, pod string) (bool, string, error) {
	rep, err := r.Run(ctx, pod, Options{})
	if err != nil {
		return false, "", err
	}
	return rep.Left == 0, rep.Summary(), nil
}

// Summary is the report in one line: drift per kind, what was repaired
// and is left, the shops whose MySQL side is not written, and the notes
// counted per kind, apart from the drift; after a repair, what it did to
// the notes (the shadow holds it removed, copied or rewrote) and which
// remain.
func (rep Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s: %s", rep.Pod, plural(rep.Shops, "shop"))
	switch n := rep.MySQLNotWritten; {
	case n > 0 && n == rep.Shops:
		b.WriteString(" in redis mode (MySQL not written in redis mode: Redis checked against the ledger only)")
	case n > 0:
		fmt.Fprintf(&b, ", %d in redis mode (MySQL not written in redis mode: Redis checked against the ledger only)", n)
	}
	if len(rep.Findings) == 0 {
		b.WriteString(", no drift")
	} else {
		fmt.Fprintf(&b, ", %s (%s)", plural(len(rep.Findings), "drift finding"), counts(rep.Counts))
		if rep.Repaired > 0 || rep.Repair {
			fmt.Fprintf(&b, ", %d repaired, %d left", rep.Repaired, rep.Left)
		}
	}
	if len(rep.Notes) > 0 {
		fmt.Fprintf(&b, "; %s, not drift (%s)", plural(len(rep.Notes), "note"), counts(rep.NoteCounts))
		if rep.Repair {
			b.WriteString(": ")
			b.WriteString(rep.notesRepaired())
		}
	}
	return b.String()
}

// noteRepairs says, per kind of note a repair rewrites, what it did to
// MySQL's shadow (where Redis decides, a repair makes the shadow Redis's).
var noteRepairs = map[string]string{
	KindShadowExtraHold:    "removed %d of MySQL's shadow holds that Redis does not have",
	KindShadowMissingHold:  "copied %d of Redis's holds into MySQL's shadow",
	KindShadowHoldMismatch: "rewrote %d of MySQL's shadow holds to Redis's allocations",
}

// notesRepaired says, for a run that repaired, what became of its notes:
// per kind, how many the repair fixed and how many of those remain, then
// every note that remains ("the repair removed 80 of MySQL's shadow holds
// that Redis does not have (shadow_extra_hold), 0 of them remain; 79
// notes remain (empty_pool 79)").
func (rep Report) notesRepaired() string {
	fixed, left := map[string]int{}, map[string]int{}
	for _, f := range rep.Notes {
		if f.Repaired {
			fixed[f.Kind]++
		} else {
			left[f.Kind]++
		}
	}
	remain := 0
	for _, n := range left {
		remain += n
	}
	var parts []string
	said := false // "the repair" is said once
	for _, k := range slices.Sorted(maps.Keys(fixed)) {
		did, ok := noteRepairs[k]
		switch {
		case !ok:
			did = "the look after the repair no longer finds %d"
		case !said:
			did, said = "the repair "+did, true
		}
		parts = append(parts, fmt.Sprintf(did+" (%s), %s", fixed[k], k, remains(left[k], "of them")))
	}
	switch {
	case len(parts) == 0:
		return fmt.Sprintf("the repair changed none of them, %s (%s)", remains(remain, noun(remain, "note")), counts(left))
	case remain == 0:
		parts = append(parts, "no note remains")
	default:
		parts = append(parts, fmt.Sprintf("%s (%s)", remains(remain, noun(remain, "note")), counts(left)))
	}
	return strings.Join(parts, "; ")
}

// remains says "1 of them remains", "0 of them remain", "79 notes remain".
func remains(n int, what string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s remains", what)
	}
	return fmt.Sprintf("%d %s remain", n, what)
}

// noun is what, for n of them: "note" or "notes".
func noun(n int, what string) string {
	if n == 1 {
		return what
	}
	return what + "s"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func counts(m map[string]int) string {
	kinds := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
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
	rep := Report{Pod: pod, Counts: map[string]int{}, NoteCounts: map[string]int{}, Findings: []Finding{}, Notes: []Finding{}, Repair: o.Repair}
	start := time.Now()
	for i, shop := range shops {
		if shop <= after {
			rep.Skipped++
			continue
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		lk, err := r.shop(ctx, p, shop, o.Repair)
		if err != nil {
			return rep, fmt.Errorf("reconcile: pod %s shop %d: %w", pod, shop, err)
		}
		rep.Shops++
		if lk.notWritten {
			rep.MySQLNotWritten++
		}
		drift := 0
		for _, f := range lk.found {
			if f.Note {
				rep.Notes = append(rep.Notes, f)
				rep.NoteCounts[f.Kind]++
				continue
			}
			drift++
			rep.Findings = append(rep.Findings, f)
			rep.Counts[f.Kind]++
			if f.Repaired {
				rep.Repaired++
			} else {
				rep.Left++
			}
		}
		if o.Checkpoint != "" {
			if err := writeCheckpoint(o.Checkpoint, shop); err != nil {
				return rep, err
			}
		}
		fmt.Fprintf(r.Progress, "reconcile %s: shop %d (%d/%d) decided by %s: %s, %s, %s elapsed\n",
			pod, shop, i+1, len(shops), lk.decider, plural(drift, "drift finding"), plural(len(lk.found)-drift, "note"),
			time.Since(start).Round(time.Millisecond))
	}
	return rep, nil
}

// look is what one look at a shop found.
type look struct {
	found   []Finding
	decider reservation.Authority
	// notWritten: Redis decides the shop in redis mode, and MySQL's
	// side was not compared.
	notWritten bool
}

func (lk look) drift() bool {
	for _, f := range lk.found {
		if !f.Note {
			return true
		}
	}
	return false
}

// repairAttempts bounds how often a shop is looked at again when its
// decider changed between the look and the repair (a handoff in flight).
const repairAttempts = 3

// shop reconciles one shop: look, then (asked to) repair, then look again
// and report what the repair fixed. Operations in flight meanwhile are
// expected: the repairs copy whole shops under the fence lock (never a
// finding's old numbers back), a repair that finds the shop handed to the
// other store is looked at again, and only the look after the repair says
// what is fixed; drift it finds that the first look did not is reported
// too, not repaired.
func (r *Reconciler) shop(ctx context.Context, p Pod, shop int64, repair bool) (look, error) {
	lk, err := r.stable(ctx, p, shop)
	if err != nil || !repair || len(lk.found) == 0 {
		return lk, err
	}
	for attempt := 1; ; attempt++ {
		if r.beforeRepair != nil {
			r.beforeRepair(shop)
		}
		err = r.repair(ctx, p, shop, lk)
		if !errors.Is(err, errDeciderMoved) || attempt == repairAttempts {
			break
		}
		if lk, err = r.stable(ctx, p, shop); err != nil || len(lk.found) == 0 {
			return lk, err
		}
	}
	if err != nil {
		return lk, err
	}
	if r.afterRepair != nil {
		r.afterRepair(shop)
	}
	after, err := r.stable(ctx, p, shop)
	if err != nil {
		return lk, err
	}
	left := map[string]bool{}
	for _, f := range after.found {
		left[f.id()] = true
	}
	seen := map[string]bool{}
	for i := range lk.found {
		seen[lk.found[i].id()] = true
		lk.found[i].Repaired = !left[lk.found[i].id()]
	}
	for _, f := range after.found {
		if !seen[f.id()] {
			lk.found = append(lk.found, f)
		}
	}
	lk.decider, lk.notWritten = after.decider, after.notWritten
	return lk, nil
}

// recheckAfter is how long stable waits before looking at a shop's drift
// again: longer than a change takes to travel from MySQL's commit through
// the relay into Redis (the relay's poll is 20ms).
const recheckAfter = 250 * time.Millisecond

// stable looks at a shop, and when it finds drift, looks again after
// recheckAfter and keeps only the drift both looks agree on: the second
// look's drift at a place (Finding.place) where the first found something
// too, whatever its kind (notes from the second). A change committed in
// MySQL and relayed into Redis between the reads of one look (the holds
// of one store, then the other's) is in neither of its reads of the feed,
// and shows as drift that the next look no longer has: under live
// traffic, without this, a kill switch over mysql_only would be refused
// now and then for nothing.
func (r *Reconciler) stable(ctx context.Context, p Pod, shop int64) (look, error) {
	first, err := r.find(ctx, p, shop)
	if err != nil || !first.drift() {
		return first, err
	}
	select {
	case <-ctx.Done():
		return look{}, ctx.Err()
	case <-time.After(recheckAfter):
	}
	again, err := r.find(ctx, p, shop)
	if err != nil {
		return look{}, err
	}
	seen := map[string]bool{}
	for _, f := range first.found {
		seen[f.place()] = true
	}
	kept := again.found[:0]
	for _, f := range again.found {
		if f.Note || seen[f.place()] {
			kept = append(kept, f)
		}
	}
	again.found = kept
	return again, nil
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

// find looks at a shop once, with the shop held still in MySQL
// (MySQL.FreezeShop): no decision, deduct or adjust of the shop
// commits while it looks, so MySQL's side does not move between its reads,
// and once the changes already in the feed are delivered to Redis (what
// the relay does; repeating a delivery changes nothing), Redis's does not
// either. Without that, under traffic, a change committed and relayed
// between the reads of the two stores shows as drift; worse, a change
// still pending on a busy cell explains any difference there, a lost
// quantity included, and the look sees nothing wrong. What is still
// pending after the delivery (a delivery that failed: a fence Redis does
// not take, a pod without a mirror) is explained as before.
//
// A look gets lookBudget with the shop held: a slow Redis or MySQL makes it
// fail, never the shop's calls waiting on it past their lock wait timeout.
func (r *Reconciler) find(ctx context.Context, p Pod, shop int64) (look, error) {
	var lk look
	err := p.MySQL.FreezeShop(ctx, shop, func(ctx context.Context) error {
		lctx, cancel := context.WithTimeout(ctx, lookBudget)
		defer cancel()
		if r.duringLook != nil {
			r.duringLook(lctx)
		}
		if p.Mirror != nil {
			_ = p.Mirror.Flush(lctx, shop) // best effort: what stays pending is explained
		}
		var err error
		lk, err = r.read(lctx, p, shop)
		if err != nil && lctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("the look took more than %s with the shop held still (its calls wait meanwhile), so it gave up: a store is slow: %w", lookBudget, err)
		}
		return err
	})
	return lk, err
}

// lookBudget bounds a look with its shop held still: well under MySQL's
// innodb_lock_wait_timeout (2s, which mysqlstore sets), so the shop's
// calls that wait for the look never fail for it.
const lookBudget = 500 * time.Millisecond

// read compares the two stores of a shop.
func (r *Reconciler) read(ctx context.Context, p Pod, shop int64) (look, error) {
	mf, err := p.MySQL.Fence(ctx, shop)
	if err != nil {
		return look{}, err
	}
	rf, err := p.Redis.Fence(ctx, shop)
	if err != nil {
		return look{}, err
	}
	fc := fences(mf, rf)
	lk := look{decider: fc.decider}
	if lk.decider == reservation.AuthorityRedis {
		lk.notWritten = r.mysqlNotWritten(ctx, p.Name, shop)
	}
	add := func(side, kind, where, detail string, note bool) {
		lk.found = append(lk.found, Finding{Shop: shop, Side: side, Kind: kind, Where: where, Detail: detail, Decider: lk.decider, Note: note})
	}
	pending, err := r.pending(ctx, p, shop)
	if err != nil {
		return look{}, err
	}
	if !lk.notWritten {
		pool, err := p.MySQL.Reconcile(ctx, shop)
		if err != nil {
			return look{}, err
		}
		for _, d := range pool {
			add("mysql", string(d.Kind), cellOf(d.Item, d.Location), poolDetail(d), d.Kind == reservation.DriftEmptyPool)
		}
	}
	rd, err := p.Redis.Drift(ctx, &reservation.DriftParams{Shop: shop})
	if err != nil {
		return look{}, err
	}
	// A change still in the feed is on its way: the drift it explains is
	// not drift. The feed is read again after Drift, so a change that was
	// delivered (and left the feed) while Drift ran is not missed.
	later, err := r.pending(ctx, p, shop)
	if err != nil {
		return look{}, err
	}
	pending.merge(later)
	if fc.problem != "" {
		// Only a fence change still in the feed explains fences that
		// disagree; other pending changes of the shop do not (after a
		// forced handoff they are what Redis missed).
		add("redis", KindFence, "", fc.problem, fc.relaying > 0 && pending.fence >= fc.relaying)
	}
	for _, d := range rd {
		if pending.explains(d) {
			continue
		}
		where := fmt.Sprintf("token %q", d.Token)
		if d.Token == "" {
			where = cellOf(d.Item, d.Location)
		}
		add("redis", string(d.Kind), where, redisDetail(d, lk.decider), false)
	}
	if lk.decider == reservation.AuthorityRedis && !lk.notWritten {
		shadow, err := shadowDrift(ctx, p, shop)
		if err != nil {
			return look{}, err
		}
		for _, d := range shadow {
			add("mysql", d.kind, fmt.Sprintf("token %q", d.token), d.detail, true)
		}
	}
	return lk, nil
}

// mysqlNotWritten reports whether the flags put the shop in redis mode
// (mode redis, or the kill switch redis_only): MySQL's reservation tables
// are not written there. Without Modes, or flags that cannot be read, it
// is false: the shop is compared in full rather than guessed about.
func (r *Reconciler) mysqlNotWritten(ctx context.Context, pod string, shop int64) bool {
	if r.Modes == nil {
		return false
	}
	d, err := r.Modes.Decide(ctx, pod, shop)
	return err == nil && d.Route().Effective == authority.ModeRedis
}

// allocs prints allocations for a person: "item 3 loc 2 ×3, item 13 loc 2 ×1".
func allocs(as []reservation.Allocation) string {
	if len(as) == 0 {
		return "nothing"
	}
	parts := make([]string, len(as))
	for i, a := range reservation.SortedAllocations(as) {
		parts[i] = fmt.Sprintf("item %d loc %d ×%d", a.Item, a.Location, a.Quantity)
	}
	return strings.Join(parts, ", ")
}

func cellOf(item, location int64) string { return fmt.Sprintf("item %d loc %d", item, location) }

// poolDetail says what is wrong with a MySQL pool, with its numbers.
func poolDetail(d reservation.PoolDrift) string {
	switch d.Kind {
	case reservation.DriftOverProjected:
		return fmt.Sprintf("pool %d + held %d is more than the ledger's available %d: units could be reserved that the ledger does not have", d.Pool, d.Held, d.Available)
	case reservation.DriftOverCap:
		return fmt.Sprintf("pool %d is over the pool cap (held %d, available %d)", d.Pool, d.Held, d.Available)
	case reservation.DriftEmptyPool:
		return fmt.Sprintf("pool empty, %d unheld in the ledger (available %d, held %d): the next reserve refills it", d.Available-d.Held, d.Available, d.Held)
	}
	return fmt.Sprintf("available %d, held %d, pool %d", d.Available, d.Held, d.Pool)
}

// redisDetail says what is wrong with Redis, with its numbers. dec is the
// store whose holds are the truth.
func redisDetail(d reservation.RedisDrift, dec reservation.Authority) string {
	switch d.Kind {
	case reservation.DriftLeftoverHold:
		return fmt.Sprintf("Redis still holds %s, which the ledger already claimed", allocs(d.Allocations))
	case reservation.DriftOrphanIndex:
		return "in Redis's expiry index without a hold"
	case reservation.DriftMissingHold:
		return fmt.Sprintf("MySQL (the decider) holds %s, Redis nothing", allocs(d.Allocations))
	case reservation.DriftExtraHold:
		return fmt.Sprintf("Redis holds %s, MySQL (the decider) nothing, and the ledger did not claim it", allocs(d.Allocations))
	case reservation.DriftHoldMismatch:
		return fmt.Sprintf("Redis holds %s, not what MySQL (the decider) holds", allocs(d.Allocations))
	case reservation.DriftQuantity:
		return fmt.Sprintf("Redis offers %d, want %d (the ledger's available minus %s's holds)", d.Have, d.Want, dec)
	case reservation.DriftMissingQuantity:
		return fmt.Sprintf("Redis has no quantity, want %d (the ledger's available minus %s's holds)", d.Want, dec)
	case reservation.DriftExtraQuantity:
		return fmt.Sprintf("Redis offers %d of stock that neither the ledger nor any hold names", d.Have)
	}
	return d.String()
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

func (fs feedState) explains(d reservation.RedisDrift) bool {
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
			out = append(out, shadowFinding{KindShadowExtraHold, h.Token, fmt.Sprintf("MySQL's shadow holds %s, Redis (the decider) nothing", allocs(h.Allocations))})
		case !slices.Equal(w, reservation.SortedAllocations(h.Allocations)):
			out = append(out, shadowFinding{KindShadowHoldMismatch, h.Token, fmt.Sprintf("MySQL's shadow holds %s, Redis (the decider) %s", allocs(h.Allocations), allocs(w))})
		}
	}
	for _, h := range snap.Holds {
		if !seen[h.Token] {
			out = append(out, shadowFinding{KindShadowMissingHold, h.Token, fmt.Sprintf("Redis (the decider) holds %s, MySQL's shadow nothing", allocs(h.Allocations))})
		}
	}
	return out, nil
}

// errDeciderMoved is repair's answer when the shop's decider is no
// longer the one its look found: a handoff (a flip, a kill switch) ran in
// between. The shop is looked at again.
var errDeciderMoved = errors.New("reconcile: the shop changed hands since it was looked at")

// repair fixes the side that does not decide: Redis where MySQL decides
// (copy and catch-up, mirror.Resync), MySQL's shadow and pools where Redis
// decides (MySQL.Repair from Redis's snapshot), unless the
// shop is in redis mode (MySQL is not written there; the handoff to MySQL
// copies Redis's state in anyway). Fences that disagree are settled
// first: after a forced handoff MySQL yields to the epoch Redis took the
// shop at; a handoff to MySQL that did not finish is finished (it is
// idempotent: any replica may finish it); a Redis fence behind a MySQL
// that decides (Redis lost it) is rewritten by the copy. A fence change
// still on its way is left to the relay. The decider's reservations are
// never changed. Each repair reads the shop afresh under the fence lock,
// so an operation that landed since the look is kept, not undone.
func (r *Reconciler) repair(ctx context.Context, p Pod, shop int64, lk look) error {
	if p.Mirror == nil {
		return fmt.Errorf("pod %s has no mirror: nothing can repair it (reconcile.Pod.Mirror)", p.Name)
	}
	mf, err1 := p.MySQL.Fence(ctx, shop)
	rf, err2 := p.Redis.Fence(ctx, shop)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if fences(mf, rf).decider != lk.decider {
		return errDeciderMoved
	}
	var errs []error
	redisDrift, shadow, fence := false, false, false
	for _, f := range lk.found {
		switch {
		case f.Kind == KindFence:
			fence = fence || !f.Note
		case f.Side == "redis":
			redisDrift = true
		case strings.HasPrefix(f.Kind, "shadow_"):
			shadow = true
		}
	}
	if fence {
		switch {
		case rf.Epoch > mf.Epoch && rf.Decider == reservation.AuthorityRedis:
			if _, err := p.MySQL.Yield(ctx, shop, rf.Epoch); err != nil {
				errs = append(errs, err)
			}
		case rf.Epoch > mf.Epoch:
			if _, err := p.Mirror.HandoffWait(ctx, shop, reservation.AuthorityMySQL, rf.Epoch, false); err != nil {
				errs = append(errs, err)
			}
		case mf.Epoch > rf.Epoch && mf.Decider == reservation.AuthorityMySQL:
			redisDrift = true
		}
	}
	switch lk.decider {
	case reservation.AuthorityMySQL:
		if redisDrift {
			if err := p.Mirror.Resync(ctx, shop); err != nil {
				errs = append(errs, err)
			}
		}
	case reservation.AuthorityRedis:
		if shadow && !lk.notWritten {
			snap, err := p.Redis.Snapshot(ctx, shop)
			if err == nil {
				err = p.MySQL.Repair(ctx, &snap)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	if !lk.notWritten {
		if _, err := p.MySQL.TrimPools(ctx, shop); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		// A handoff between the check above and the repair makes the
		// repair refuse (Resync and Repair check the fence under its
		// lock): look again rather than fail the run.
		mf, err1 := p.MySQL.Fence(ctx, shop)
		rf, err2 := p.Redis.Fence(ctx, shop)
		if err1 == nil && err2 == nil && fences(mf, rf).decider != lk.decider {
			return errDeciderMoved
		}
		return err
	}
	return nil
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
