package lossless_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/history"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// readsVia is a replica's facade as the reads self-check drives it: its
// own Get, or (stale) the broken one below.
type readsVia struct {
	r     *replica
	stale bool
}

var (
	_ history.Reservations = readsVia{}
	_ history.Getter       = readsVia{}
	_ history.Router       = readsVia{}
)

func (s readsVia) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	return s.r.facade.Reserve(ctx, p)
}

func (s readsVia) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	return s.r.facade.Claim(ctx, p)
}

func (s readsVia) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	return s.r.facade.Release(ctx, p)
}

func (s readsVia) Get(ctx context.Context, p *reservation.GetParams) (reservation.Hold, error) {
	if s.stale {
		return staleGet(ctx, s.r, p)
	}
	return s.r.facade.Get(ctx, p)
}

func (s readsVia) Via() string { return fmt.Sprintf("%s (flags v%d)", s.r.name, s.r.view.version()) }

// staleGet is a replica's facade's GET with a deliberately broken read path:
// the one the facade had before issue 24 ("a read, not a decision"). A
// GET reads the store the replica's flags name, without the fence, so a
// replica whose flags are not the fence's reads the store that only
// follows: a hold Redis has not been told of yet, or MySQL's own shadow
// hold. It is the broken subject that shows the reads check failing,
// whatever the facade's Get does.
func staleGet(ctx context.Context, r *replica, p *reservation.GetParams) (reservation.Hold, error) {
	d, err := r.view.Decide(ctx, r.pod.name, p.Shop)
	if err != nil {
		return reservation.Hold{}, err
	}
	if d.Route().Authority == reservation.AuthorityMySQL {
		return r.my.Get(ctx, p)
	}
	return r.rd.Get(ctx, p)
}

// TestReadsCheckCatchesStaleReads: the reads check (history.CheckReads,
// which TestModel runs on every GET and claim) and the ledger's check of
// each claim against its reserve must fail on a broken subject, and pass
// the facade. In readsAcrossFlips the replicas' flags disagree the way
// they do for up to 200 ms after every flip, and no relay runs, so what
// the follower lacks stays lacking. Through staleGet:
//   - a replica whose flags say mysql while Redis still decides (no call
//     has handed the shop off) reads MySQL: a reservation Redis placed in
//     redis mode is not found, and one placed in shadow mode is MySQL's
//     shadow hold, at another location with its own expiry;
//   - once MySQL decides, a replica whose flags still say shadow reads
//     Redis: a reservation MySQL placed is not found, and one MySQL
//     claimed is still held.
//
// The GETs through the replica whose flags name the decider are right,
// and the check finds nothing wrong with them; nor with any GET through
// the facade, which reads through the fences (the facade before issue 24
// failed this subtest as staleGet does). The ledger check is then shown a
// claims row moved to another location (the ledger moved with it, so only
// the per-token rule can see it).
func TestReadsCheckCatchesStaleReads(t *testing.T) {
	t.Parallel()
	t.Run("stale reads", func(t *testing.T) {
		t.Parallel()
		w, reads := readsAcrossFlips(t, true)
		want := []struct{ token, via, says string }{
			{"a", "pod-a/1", "said not_found"},
			{"b", "pod-a/2", "said not_found"},
			{"b", "pod-a/1", "sent after the claim was acknowledged"},
			{"c", "pod-a/2", "said held [item 2 location 1 x1]"},
		}
		for _, wv := range want {
			found := false
			for _, v := range reads.Violations {
				offending, _, _ := strings.Cut(v, " said ")
				found = found || strings.Contains(v, "token "+wv.token+":") && strings.Contains(offending, "via "+wv.via) && strings.Contains(v, wv.says)
			}
			if !found {
				t.Errorf("the reads check did not report token %s read through %s (%s)", wv.token, wv.via, wv.says)
			}
		}
		for _, v := range reads.Violations {
			t.Logf("found, as it must: %s", v)
			if offending, _, _ := strings.Cut(v, " said "); strings.Contains(offending, "via pod-a/0") {
				t.Errorf("a read through the replica whose flags name the decider was judged wrong: %s", v)
			}
		}
		if len(reads.Violations) != len(want) {
			t.Errorf("%d violations, want %d", len(reads.Violations), len(want))
		}

		// The ledger: b's claims row deducted item 1 at location 1, as
		// its reserve held. Moved to location 2, with the ledger moved the
		// same way (so every row still adds up), only the per-token rule
		// sees it.
		claims := claimsOutcome{acked: map[string]bool{fmt.Sprintf("%d/b", shopA): true}, unknown: map[string]bool{}}
		var out violations
		if n := w.checkLedger(&out, claims, reads.Acked); n != 1 || len(out) != 0 {
			t.Fatalf("the ledger before the change: %d claims rows held to their reserve (want 1), violations %q", n, out)
		}
		moveClaim(t, w, "b", 1, 1, 2)
		w.checkLedger(&out, claims, reads.Acked)
		if len(out) != 1 || !strings.Contains(out[0], "token 1001/b was deducted at [item 1 location 2 x1], but its reserve was acknowledged holding [item 1 location 1 x1]") {
			t.Fatalf("the ledger with b's deduction moved to another location: %q, want one violation naming b", out)
		}
		t.Logf("found, as it must: %s", out[0])
	})
	t.Run("the facade", func(t *testing.T) {
		t.Parallel()
		_, reads := readsAcrossFlips(t, false)
		for _, v := range reads.Violations {
			t.Errorf("%s", v)
		}
	})
}

// readsAcrossFlips reserves, reads and claims through one pod's three
// replicas while their flags disagree, GETs through staleGet (stale) or
// the facade, and returns the world and what the reads check found. Every
// GET is judged: six against a live hold, two after the claim.
func readsAcrossFlips(t *testing.T, stale bool) (*world, history.ReadsResult) {
	t.Helper()
	w, rs := caseWorld(t, worldConfig{noRelay: true})
	ctx := ctxT(t)
	for _, loc := range []int64{1, 2} {
		w.setStock(shopA, 1, loc, 5)
		w.setStock(shopA, 2, loc, 1)
	}
	rec := history.New()
	cs := make([]*history.Client, len(rs))
	for i, r := range rs {
		cs[i] = rec.Client(readsVia{r, stale})
	}
	reserve := func(c *history.Client, token string, item int64, locs ...int64) {
		t.Helper()
		res, err := c.Reserve(ctx, &reservation.ReserveParams{Shop: shopA, Token: token, TTL: time.Minute, Lines: cart(item, 1, locs...)})
		if err != nil || res.Status != reservation.StatusReserved {
			t.Fatalf("reserve %s: %+v %v", token, res, err)
		}
	}
	get := func(c *history.Client, token string) {
		_, _ = c.Get(ctx, &reservation.GetParams{Shop: shopA, Token: token})
	}

	// Redis decides (v1): x holds item 2's unit at location 1, which
	// MySQL is not told of; b holds item 1 at location 1.
	reserve(cs[0], "x", 2, 1)
	reserve(cs[1], "b", 1, 1)
	// Shadow (v2): Redis serves c from location 2 (location 1's unit is
	// x's); MySQL's shadow hold, not knowing x, takes location 1.
	w.flipTo(mode(authority.ModeShadow))
	reserve(cs[0], "c", 2, 1, 2)
	if err := rs[0].facade.Close(ctx); err != nil { // the shadow hold is in place
		t.Fatal(err)
	}
	// Replica 2 alone sees mysql (v3); no call has handed the shop off.
	w.flipTo(mode(authority.ModeMySQL), rs[2])
	get(cs[2], "c") // stale: MySQL's shadow hold
	get(cs[2], "b") // stale: not found, MySQL never heard of b
	// Replica 0 sees mysql too (v4) and its reserve hands the shop to
	// MySQL, which takes Redis's holds over; replica 1 still says shadow.
	w.flipTo(mode(authority.ModeMySQL), rs[0])
	reserve(cs[0], "a", 1, 1)
	get(cs[1], "a") // stale: not found, Redis never heard of a
	if _, err := cs[0].Claim(ctx, &reservation.ClaimParams{Shop: shopA, Token: "b"}); err != nil {
		t.Fatalf("claim b: %v", err)
	}
	get(cs[1], "b") // stale: still held in Redis
	// The replica whose flags name the decider reads right either way.
	for _, token := range []string{"a", "b", "c", "x"} {
		get(cs[0], token)
	}

	reads := history.CheckReads(rec.Calls(), history.ReadsOptions{})
	t.Logf("%s", reads)
	if reads.Gets != 8 || reads.Held != 6 || reads.Claimed != 2 {
		t.Errorf("judged %d GETs of %d against a live hold and %d after the claim, want 6 and 2 of 8", reads.Held, reads.Gets, reads.Claimed)
	}
	return w, reads
}

// moveClaim rewrites a token's claims row and the ledger as if its claim
// had deducted item at location to instead of from: a claim that
// deducted another location than its reserve held.
func moveClaim(t *testing.T, w *world, token string, item, from, to int64) {
	t.Helper()
	db := w.podOf(shopA).db
	ctx := context.Background()
	var doc string
	if err := db.QueryRowContext(ctx, "SELECT allocations FROM reservation_claims WHERE shop_id = ? AND token = ?", shopA, token).Scan(&doc); err != nil {
		t.Fatal(err)
	}
	var as []reservation.Allocation
	if err := json.Unmarshal([]byte(doc), &as); err != nil {
		t.Fatal(err)
	}
	var moved int64
	for i := range as {
		if as[i].Item == item && as[i].Location == from {
			as[i].Location = to
			moved += as[i].Quantity
		}
	}
	b, err := json.Marshal(as)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"UPDATE reservation_claims SET allocations = ? WHERE shop_id = ? AND token = ?", []any{string(b), shopA, token}},
		{"UPDATE inventory_ledger SET available = available + ? WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?", []any{moved, shopA, item, from}},
		{"UPDATE inventory_ledger SET available = available - ? WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?", []any{moved, shopA, item, to}},
	} {
		if _, err := db.ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
}
