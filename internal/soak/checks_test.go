package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/internal/reconcile"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// pod is one pod of the soak: its database and Redis prefix, the
// addresses the servers reach them at (pod-a's through proxies), and the
// stores and mirror the test builds straight on them for its checks.
type pod struct {
	name   string
	db     *testdb.DB
	redis  *testredis.Redis
	shops  []int64
	myDSN  string // what serve uses (through a proxy for pod-a)
	rdAddr string

	my     *mysqlstore.Store
	rd     *redisstore.Store
	mirror *mirror.Mirror
}

// The end-state checks, the model test's (internal/lossless) over the
// soak's databases: each returns what it found, one line per violation.

// ledgerReport is what the ledger check counted.
type ledgerReport struct {
	units               int64 // deducted over every ledger row
	rows                int   // claims rows
	acked, unknownTaken int   // claims rows of acknowledged claims, of claims without an answer
}

func (r ledgerReport) String() string {
	return fmt.Sprintf("%d units deducted = %d claims rows = %d acknowledged claims + %d claims without an answer that took effect",
		r.units, r.rows, r.acked, r.unknownTaken)
}

// checkLedger: every ledger row went down from its stock by exactly what
// its claims rows record, and not below zero; each claims row is a claim
// acknowledged to a client (with the allocations the client was told) or
// one whose outcome the client never learned; each acknowledged claim
// has its claims row.
func checkLedger(ctx context.Context, pods []*pod, stock map[cartKey]int64, claims map[string]*claimRecord) (ledgerReport, []string, error) {
	var rep ledgerReport
	var out []string
	seen := map[string]bool{}
	deducted := map[cartKey]int64{}
	ledgerRows := 0
	for _, p := range pods {
		rows, err := p.db.QueryContext(ctx, "SELECT shop_id, token, allocations FROM reservation_claims")
		if err != nil {
			return rep, nil, err
		}
		for rows.Next() {
			var shop int64
			var token, doc string
			if err := rows.Scan(&shop, &token, &doc); err != nil {
				rows.Close()
				return rep, nil, err
			}
			id := fmt.Sprintf("%d/%s", shop, token)
			seen[id] = true
			rep.rows++
			var as []allocation
			if err := json.Unmarshal([]byte(doc), &as); err != nil {
				rows.Close()
				return rep, nil, fmt.Errorf("claims row %s: %w", id, err)
			}
			for _, a := range as {
				deducted[cartKey{shop, a.Item, a.Location}] += a.Quantity
			}
			c := claims[id]
			switch {
			case c != nil && c.acked:
				rep.acked++
				if !sameDeduction(c.allocs, as) {
					out = append(out, fmt.Sprintf("ledger: the claim of %s was acknowledged with %v, its claims row deducted %v", id, c.allocs, as))
				}
			case c != nil && c.unknown:
				rep.unknownTaken++
			default:
				out = append(out, fmt.Sprintf("ledger: %s was deducted (%v) but no client was told it was claimed, nor left without an answer", id, as))
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return rep, nil, err
		}

		lrows, err := p.db.QueryContext(ctx, "SELECT shop_id, inventory_item_id, location_id, available FROM inventory_ledger")
		if err != nil {
			return rep, nil, err
		}
		for lrows.Next() {
			var k cartKey
			var avail int64
			if err := lrows.Scan(&k.shop, &k.item, &k.loc, &avail); err != nil {
				lrows.Close()
				return rep, nil, err
			}
			ledgerRows++
			n, ok := stock[k]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("ledger: a row for %v, which was never stocked", k))
			case avail < 0:
				out = append(out, fmt.Sprintf("ledger: %v oversold: available %d", k, avail))
			}
			if want := n - deducted[k]; ok && avail != want {
				out = append(out, fmt.Sprintf("ledger: %v has %d, want %d (stock %d minus %d deducted by its claims rows)", k, avail, want, n, deducted[k]))
			}
			rep.units += n - avail
		}
		err = lrows.Err()
		lrows.Close()
		if err != nil {
			return rep, nil, err
		}
	}
	if ledgerRows != len(stock) {
		out = append(out, fmt.Sprintf("ledger: %d rows, %d stocked", ledgerRows, len(stock)))
	}
	for _, id := range slices.Sorted(maps.Keys(claims)) {
		if claims[id].acked && !seen[id] {
			out = append(out, fmt.Sprintf("ledger: the claim of %s was acknowledged (%v) but the ledger has no claims row for it (lost)", id, claims[id].allocs))
		}
	}
	return rep, out, nil
}

func sameDeduction(a, b []allocation) bool {
	sum := func(as []allocation) map[[2]int64]int64 {
		m := map[[2]int64]int64{}
		for _, x := range as {
			m[[2]int64{x.Item, x.Location}] += x.Quantity
		}
		return m
	}
	return fmt.Sprint(sum(a)) == fmt.Sprint(sum(b))
}

// checkNoHolds: after every hold's expiry (and the reapers), neither store
// holds anything.
func checkNoHolds(ctx context.Context, pods []*pod) ([]string, error) {
	var out []string
	for _, p := range pods {
		var n int64
		if err := p.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM reservations WHERE state = 'held'").Scan(&n); err != nil {
			return nil, err
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("holds: %s's MySQL still holds %d reservation(s) after every expiry", p.name, n))
		}
		for _, shop := range p.shops {
			snap, err := p.rd.Snapshot(ctx, shop)
			if err != nil {
				return nil, err
			}
			if len(snap.Holds) > 0 {
				var toks []string
				for _, h := range snap.Holds {
					toks = append(toks, h.Token)
				}
				slices.Sort(toks)
				if len(toks) > 10 {
					toks = append(toks[:10], "...")
				}
				out = append(out, fmt.Sprintf("holds: %s's Redis still holds %d reservation(s) of shop %d after every expiry: %s", p.name, len(snap.Holds), shop, strings.Join(toks, ", ")))
			}
		}
	}
	return out, nil
}

// checkDrained: every pod's change feed is empty.
func checkDrained(ctx context.Context, pods []*pod) error {
	for _, p := range pods {
		l, err := p.mirror.Lag(ctx)
		if err != nil {
			return err
		}
		if l.Changes > 0 {
			return fmt.Errorf("%s's change feed has %d change(s), the oldest %s old", p.name, l.Changes, l.Oldest)
		}
	}
	return nil
}

// checkAgree: reconcile, without repair, finds no drift in any pod (notes
// are not drift). It returns each pod's summary.
func checkAgree(ctx context.Context, rc *reconcile.Reconciler, pods []*pod) ([]string, []string, error) {
	var sums, out []string
	for _, p := range pods {
		rep, err := rc.Run(ctx, p.name, reconcile.Options{Shops: p.shops})
		if err != nil {
			return nil, nil, err
		}
		sums = append(sums, rep.Summary())
		for _, f := range rep.Findings {
			if !f.Note {
				out = append(out, fmt.Sprintf("reconcile %s: shop %d %s %s (decider %s): %s", p.name, f.Shop, f.Side, f.Kind, f.Decider, f.Detail))
			}
		}
	}
	return sums, out, nil
}

// TestChecksCatchABrokenEnd shows each end-state check failing on a pod
// left in the state it must catch: a deduction no client was told of, an
// acknowledged claim without its row, a ledger row off its claims, holds
// left in both stores, a change feed not delivered, and a Redis that lost
// what MySQL decided.
func TestChecksCatchABrokenEnd(t *testing.T) {
	ctx := context.Background()
	p := &pod{name: "pod-x", db: testdb.New(t), redis: testredis.New(t), shops: []int64{9001}}
	var err error
	if p.my, err = mysqlstore.New(mysqlstore.Config{DB: p.db.DB, Registerer: prometheus.NewRegistry()}); err != nil {
		t.Fatal(err)
	}
	if p.rd, err = redisstore.New(redisstore.Config{Client: p.redis.Client, Prefix: p.redis.Prefix, Ledger: p.my, Source: p.my, Registerer: prometheus.NewRegistry()}); err != nil {
		t.Fatal(err)
	}
	if p.mirror, err = mirror.New(mirror.Config{Pod: p.name, MySQL: p.my, Redis: p.rd, Registerer: prometheus.NewRegistry()}); err != nil {
		t.Fatal(err)
	}
	pods := []*pod{p}
	const shop = 9001
	stock := int64(10)
	if _, err := p.rd.Adjust(ctx, &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Available: &stock}); err != nil {
		t.Fatal(err)
	}
	line := []reservation.Line{{Item: 1, Quantity: 2, Locations: []int64{1}}}
	reserve := func(s reservation.Store, token string) {
		t.Helper()
		res, err := s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, Lines: line, TTL: time.Hour})
		if err != nil || res.Status != reservation.StatusReserved {
			t.Fatalf("reserve %s in %s: %+v %v", token, s.Name(), res, err)
		}
	}
	expect := func(what string, found []string, want ...string) {
		t.Helper()
		t.Logf("%s check found: %s", what, strings.Join(found, "; "))
		for _, w := range want {
			if !slices.ContainsFunc(found, func(f string) bool { return strings.Contains(f, w) }) {
				t.Errorf("%s: found %q, want a finding with %q", what, found, w)
			}
		}
	}

	// Redis decides (no fence): a claim the client never heard of, and
	// an acknowledged claim that left no row.
	reserve(p.rd, "paid")
	if _, err := p.rd.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "paid"}); err != nil {
		t.Fatal(err)
	}
	claims := map[string]*claimRecord{"9001/lost": {acked: true, allocs: []allocation{{1, 1, 2}}}}
	_, found, err := checkLedger(ctx, pods, map[cartKey]int64{{shop, 1, 1}: 10}, claims)
	if err != nil {
		t.Fatal(err)
	}
	expect("ledger", found, "9001/paid was deducted", "9001/lost was acknowledged")
	// The client was told, with other allocations; the ledger's stock is
	// not what it was given.
	claims = map[string]*claimRecord{"9001/paid": {acked: true, allocs: []allocation{{1, 1, 1}}}}
	_, found, err = checkLedger(ctx, pods, map[cartKey]int64{{shop, 1, 1}: 12}, claims)
	if err != nil {
		t.Fatal(err)
	}
	expect("ledger", found, "acknowledged with", "has 8, want 10")

	// A hold in Redis; MySQL takes the shop over and holds another, whose
	// change for Redis is not delivered yet.
	reserve(p.rd, "held-in-redis")
	if _, err := p.mirror.Handoff(ctx, shop, reservation.AuthorityMySQL, 1, false); err != nil {
		t.Fatal(err)
	}
	reserve(p.my, "held-in-mysql")
	found, err = checkNoHolds(ctx, pods)
	if err != nil {
		t.Fatal(err)
	}
	expect("holds", found, "pod-x's MySQL still holds 2", "pod-x's Redis still holds")
	if err := checkDrained(ctx, pods); err == nil {
		t.Error("feeds: a change not delivered to Redis went unnoticed")
	}
	rc := reconcile.New([]reconcile.Pod{{Name: p.name, MySQL: p.my, Redis: p.rd, Mirror: p.mirror}})
	if err := p.mirror.Flush(ctx, shop); err != nil {
		t.Fatal(err)
	}
	if err := checkDrained(ctx, pods); err != nil {
		t.Fatalf("feeds after a flush: %v", err)
	}
	if _, found, err = checkAgree(ctx, rc, pods); err != nil || len(found) != 0 {
		t.Fatalf("reconcile of a pod whose Redis follows MySQL: %q %v", found, err)
	}

	// Redis loses its data while MySQL decides.
	if err := p.redis.Client.Del(ctx, p.redis.Keys(t)...).Err(); err != nil {
		t.Fatal(err)
	}
	_, found, err = checkAgree(ctx, rc, pods)
	if err != nil {
		t.Fatal(err)
	}
	expect("reconcile", found, "reconcile pod-x: shop 9001 redis")
}
