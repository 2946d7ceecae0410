// Package reconcile compares the two stores of a pod item by item, like
// Vitess's VDiff: the ledger against the MySQL unit pools and holds, and
// against the Redis quantities and holds. It reports drift with counts and,
// asked to, repairs the side that is not the authority, never the
// authority. It is resumable per shop and prints progress on long runs.
package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
)

// Pod is one pod's stores.
type Pod struct {
	Name  string
	MySQL *mysqlstore.Store
	Redis *redisstore.Store
}

// Reconciler reconciles pods. It implements rollout.Reconciler.
type Reconciler struct {
	pods  map[string]Pod
	modes rollout.ModeSource
	// Progress receives one line per shop on long runs. Default: io.Discard.
	Progress io.Writer
}

var _ rollout.Reconciler = (*Reconciler)(nil)

// New returns a reconciler over pods. modes tells which store is the
// authority of each shop (nil: Redis everywhere).
func New(pods []Pod, modes rollout.ModeSource) *Reconciler {
	m := make(map[string]Pod, len(pods))
	for _, p := range pods {
		m[p.Name] = p
	}
	return &Reconciler{pods: m, modes: modes, Progress: io.Discard}
}

// Options qualify a run.
type Options struct {
	// Shops limits the run (default: every shop the pod's ledger knows).
	Shops []int64
	// Repair fixes what is found on the non-authoritative side.
	Repair bool
	// Authority forces which store is the truth; zero asks the mode source
	// per shop (MySQL for mysql and mysql_only unless the kill switch is
	// engaged; Redis otherwise).
	Authority reservation.Authority
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
	// Kind classifies it (mysqlstore.DriftKind or redisstore.DriftKind).
	Kind string `json:"kind"`
	// Detail is the finding with its numbers.
	Detail string `json:"detail"`
	// Authority is the store that was the truth for this shop.
	Authority reservation.Authority `json:"authority"`
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

// Clean reports whether a pod has no drift that matters for a switch of
// authority (the empty-pool note does not count).
func (r *Reconciler) Clean(ctx context.Context, pod string) (bool, string, error) {
	rep, err := r.Run(ctx, pod, Options{Authority: reservation.AuthorityMySQL})
	if err != nil {
		return false, "", err
	}
	n := 0
	for _, f := range rep.Findings {
		if f.Kind != string(mysqlstore.DriftEmptyPool) {
			n++
		}
	}
	return n == 0, rep.Summary(), nil
}

// RepairFrom runs a repair of pod's shops (nil: all) with authority as the
// truth and returns the report's summary: rollout.Controller calls it before a released kill
// switch hands a pod back to MySQL.
func (r *Reconciler) RepairFrom(ctx context.Context, pod string, authority reservation.Authority, shops []int64) (string, error) {
	rep, err := r.Run(ctx, pod, Options{Repair: true, Authority: authority, Shops: shops})
	if err != nil {
		return "", err
	}
	return rep.Summary(), nil
}

// Summary is the report in one line. Empty pools are notes, not drift:
// the next reserve refills them from the ledger.
func (rep Report) Summary() string {
	drift, notes := 0, 0
	kinds := make([]string, 0, len(rep.Counts))
	for k, n := range rep.Counts {
		if k == "mysql:"+string(mysqlstore.DriftEmptyPool) {
			notes += n
			continue
		}
		drift += n
		kinds = append(kinds, k)
	}
	note := ""
	if notes > 0 {
		note = fmt.Sprintf("; %d empty pool(s) noted", notes)
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
	if o.Authority != "" && !o.Authority.Valid() {
		return Report{}, fmt.Errorf("reconcile: authority must be %q or %q", reservation.AuthorityMySQL, reservation.AuthorityRedis)
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
		auth := o.Authority
		if auth == "" {
			auth = r.authority(ctx, pod, shop)
		}
		fs, err := r.shop(ctx, p, shop, auth, o.Repair)
		if err != nil {
			return rep, fmt.Errorf("reconcile: pod %s shop %d: %w", pod, shop, err)
		}
		rep.Shops++
		for _, f := range fs {
			rep.Counts[f.Side+":"+f.Kind]++
			// Empty pools are notes, not drift (see Summary): a note gone
			// after the repair is not a repair.
			if f.Repaired && f.Kind != string(mysqlstore.DriftEmptyPool) {
				rep.Repaired++
			}
		}
		rep.Findings = append(rep.Findings, fs...)
		if o.Checkpoint != "" {
			if err := writeCheckpoint(o.Checkpoint, shop); err != nil {
				return rep, err
			}
		}
		fmt.Fprintf(r.Progress, "reconcile %s: shop %d (%d/%d) authority %s: %d finding(s), %s elapsed\n",
			pod, shop, i+1, len(shops), auth, len(fs), time.Since(start).Round(time.Millisecond))
	}
	return rep, nil
}

func (r *Reconciler) authority(ctx context.Context, pod string, shop int64) reservation.Authority {
	if r.modes == nil {
		return reservation.AuthorityRedis
	}
	d, err := r.modes.Decide(ctx, pod, shop)
	if err != nil {
		return reservation.AuthorityRedis
	}
	return d.Route().Authority
}

// shop reconciles one shop: find, then (asked to) repair the side that is
// not the authority, then find again to confirm.
func (r *Reconciler) shop(ctx context.Context, p Pod, shop int64, auth reservation.Authority, repair bool) ([]Finding, error) {
	found, err := r.find(ctx, p, shop, auth)
	if err != nil || !repair || len(found) == 0 {
		return found, err
	}
	if err := r.repair(ctx, p, shop, auth, found); err != nil {
		return found, err
	}
	after, err := r.find(ctx, p, shop, auth)
	if err != nil {
		return found, err
	}
	left := map[string]bool{}
	for _, f := range after {
		left[f.Side+f.Kind+f.Detail] = true
	}
	for i := range found {
		found[i].Repaired = !left[found[i].Side+found[i].Kind+found[i].Detail]
	}
	return found, nil
}

// find lists the shop's drift. The MySQL pool is always checked against
// the ledger; Redis against the ledger and the true holds; and where Redis
// is the authority, MySQL's holds against Redis's.
func (r *Reconciler) find(ctx context.Context, p Pod, shop int64, auth reservation.Authority) ([]Finding, error) {
	var out []Finding
	pool, err := p.MySQL.Reconcile(ctx, shop)
	if err != nil {
		return nil, err
	}
	for _, d := range pool {
		out = append(out, Finding{Shop: shop, Side: "mysql", Kind: string(d.Kind), Detail: d.String(), Authority: auth})
	}
	// Redis against the truth.
	rd, err := p.Redis.Drift(ctx, &redisstore.DriftParams{Shop: shop, HoldsFrom: auth})
	if err != nil {
		return nil, err
	}
	for _, d := range rd {
		out = append(out, Finding{Shop: shop, Side: "redis", Kind: string(d.Kind), Detail: d.String(), Authority: auth})
	}
	if auth == reservation.AuthorityRedis {
		// MySQL's holds against Redis's: the comparison seen from MySQL.
		cmp, err := p.Redis.Drift(ctx, &redisstore.DriftParams{Shop: shop, HoldsFrom: reservation.AuthorityMySQL})
		if err != nil {
			return nil, err
		}
		for _, d := range cmp {
			if kind, ok := mysqlHoldKind[d.Kind]; ok {
				out = append(out, Finding{Shop: shop, Side: "mysql", Kind: kind, Detail: d.String(), Authority: auth})
			}
		}
	}
	return out, nil
}

// mysqlHoldKind renames Redis-side hold findings (computed with MySQL as
// the reference) as what they say about MySQL when Redis is the truth.
var mysqlHoldKind = map[redisstore.DriftKind]string{
	redisstore.DriftMissingHold:  "extra_hold",   // MySQL holds a token Redis does not
	redisstore.DriftExtraHold:    "missing_hold", // Redis holds a token MySQL does not
	redisstore.DriftHoldMismatch: "hold_mismatch",
}

// repair fixes the non-authoritative side only.
func (r *Reconciler) repair(ctx context.Context, p Pod, shop int64, auth reservation.Authority, found []Finding) error {
	if auth == reservation.AuthorityMySQL {
		// Redis follows MySQL: rebuild the shop's quantities and holds.
		// MySQL's own pool drift is reported, not repaired here: the
		// authority is never touched (an Adjust trims its pool).
		_, err := p.Redis.Resync(ctx, &redisstore.ResyncParams{Shops: []int64{shop}, HoldsFrom: reservation.AuthorityMySQL})
		return err
	}
	// MySQL follows Redis: its holds become Redis's, its pools are trimmed.
	cmp, err := p.Redis.Drift(ctx, &redisstore.DriftParams{Shop: shop, HoldsFrom: reservation.AuthorityMySQL})
	if err != nil {
		return err
	}
	var put []reservation.Hold
	var drop []string
	for _, d := range cmp {
		switch d.Kind {
		case redisstore.DriftMissingHold:
			keep, err := acknowledgedByMySQL(ctx, p, shop, d.Token)
			if err != nil {
				return err
			}
			if !keep {
				drop = append(drop, d.Token)
			}
		case redisstore.DriftExtraHold, redisstore.DriftHoldMismatch:
			h, err := p.Redis.Get(ctx, &reservation.GetParams{Shop: shop, Token: d.Token})
			if errors.Is(err, reservation.ErrNotFound) {
				continue // gone since: nothing to copy
			}
			if err != nil {
				return err
			}
			put = append(put, h)
		}
	}
	if len(put)+len(drop) > 0 {
		if err := p.MySQL.RepairHolds(ctx, shop, put, drop); err != nil {
			return err
		}
		if err := followRedis(ctx, p, shop, put, drop); err != nil {
			return err
		}
	}
	_, err = p.MySQL.TrimPools(ctx, shop)
	return err
}

// acknowledgedByMySQL says whether MySQL's hold of token was made while
// MySQL was the authority: a reservation acknowledged to a buyer that
// Redis never got (its shadow reserve failed), claimable under a kill
// switch through the facade's fallback to the store that holds it. Even
// with Redis as the truth, such a hold is kept: dropping it would lose a
// paid-for cart when MySQL answers again.
func acknowledgedByMySQL(ctx context.Context, p Pod, shop int64, token string) (bool, error) {
	h, err := p.MySQL.Get(ctx, &reservation.GetParams{Shop: shop, Token: token})
	if errors.Is(err, reservation.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return h.Authority == reservation.AuthorityMySQL, nil
}

// followPasses bounds followRedis.
const followPasses = 3

// followRedis makes MySQL's holds of the tokens a repair touched agree
// with Redis's once more, pass after pass until they do (at most
// followPasses, then it checks once more and fails if they still differ).
//
// A repair under live traffic races the facade: a hold copied from Redis
// may have been released or claimed between the lookup and the copy (the
// shadow's release found nothing to release in MySQL, and the copy then
// left a hold nobody owns, refusing buyers after the flip until it
// expired); a hold dropped as unknown to Redis may have been the shadow's
// half of a reserve whose Redis half landed just after the snapshot. Each
// touched token is looked up in both stores again after the repair: any
// write the facade made before that lookup is seen, and one it makes
// after it finds the repaired hold and applies to it.
func followRedis(ctx context.Context, p Pod, shop int64, put []reservation.Hold, drop []string) error {
	tokens := drop
	for _, h := range put {
		tokens = append(tokens, h.Token)
	}
	for pass := 0; len(tokens) > 0; pass++ {
		var again []reservation.Hold
		var gone, next []string
		for _, token := range tokens {
			get := &reservation.GetParams{Shop: shop, Token: token}
			want, werr := p.Redis.Get(ctx, get)
			if werr != nil && !errors.Is(werr, reservation.ErrNotFound) {
				return werr
			}
			have, herr := p.MySQL.Get(ctx, get)
			if herr != nil && !errors.Is(herr, reservation.ErrNotFound) {
				return herr
			}
			switch {
			case werr != nil && herr == nil && have.Authority == reservation.AuthorityMySQL:
				continue // see acknowledgedByMySQL
			case werr != nil && herr == nil:
				gone = append(gone, token)
			case werr == nil && (herr != nil || !sameHold(want, have)):
				again = append(again, want)
			default:
				continue
			}
			next = append(next, token)
		}
		if len(next) == 0 {
			return nil
		}
		if pass == followPasses {
			// Still moving: rather than leave the last pass's guess (a
			// hold dropped just before its Redis half landed, say), say
			// so; the caller keeps the switch engaged and runs it again.
			return fmt.Errorf("reconcile: shop %d: %d hold(s) still changing after %d repair passes (live traffic on them); run the repair again", shop, len(next), followPasses)
		}
		if err := p.MySQL.RepairHolds(ctx, shop, again, gone); err != nil {
			return err
		}
		tokens = next
	}
	return nil
}

// sameHold compares two stores' holds of a token: expiry and
// allocations, in any order.
func sameHold(a, b reservation.Hold) bool {
	order := func(as []reservation.Allocation) []reservation.Allocation {
		return slices.SortedFunc(slices.Values(as), func(x, y reservation.Allocation) int {
			return cmp.Or(cmp.Compare(x.Item, y.Item), cmp.Compare(x.Location, y.Location))
		})
	}
	return a.ExpiresAt.Equal(b.ExpiresAt) && slices.Equal(order(a.Allocations), order(b.Allocations))
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
