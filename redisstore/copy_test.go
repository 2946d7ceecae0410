package redisstore_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// The change log of a copy into MySQL (copy.go): off until StartCopy, so
// a shop not being copied pays nothing; on, every script that writes a
// hold or a tombstone logs the token (reserve, refusal, release, a claim's
// settle, the reaper, an applied change of MySQL's feed), in order, read
// page by page; joined by a second StartCopy (same id); EndCopy turns it
// off, and a read of an ended copy's log says it was lost.
func TestCopyLogListsEveryChange(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			// The claim cleans up on its path: Redis holds its tombstone at once.
			b := setupWith(t, srv.new, func(c *redisstore.Config) { c.InlineClaimCleanup = true })
			c := ctx(t)
			b.stock(t, 1, 1, 10)
			b.reserve(t, "before", time.Minute, line(1, 1, 1))
			if strings.Contains(b.dump(t), ":chg zset") {
				t.Fatalf("a log exists before any copy:\n%s", b.dump(t))
			}
			cp, err := b.s.StartCopy(c, shop)
			if err != nil || cp.ID == 0 || cp.Size != 1 {
				t.Fatalf("start copy: %+v %v, want an id and size 1", cp, err)
			}
			if again, err := b.s.StartCopy(c, shop); err != nil || again.ID != cp.ID {
				t.Errorf("a second start joins the copy: %+v %v, want id %d", again, err, cp.ID)
			}

			b.reserve(t, "held", time.Minute, line(1, 2, 1))
			b.reserve(t, "released", time.Minute, line(1, 1, 1))
			if _, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "released"}); err != nil {
				t.Fatal(err)
			}
			if res, err := b.s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "refused", Lines: []reservation.Line{line(1, 50, 1)}, TTL: time.Minute}); err != nil || res.Status != reservation.StatusInsufficient {
				t.Fatalf("refused reserve: %+v %v", res, err)
			}
			b.reserve(t, "claimed", time.Minute, line(1, 1, 1))
			if _, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "claimed"}); err != nil {
				t.Fatal(err)
			}
			b.reserve(t, "due", time.Minute, line(1, 1, 1))
			b.age(t, "due", time.Second, -1)
			if r, err := b.s.Reap(c, &reservation.ReapParams{}); err != nil || r.Holds != 1 {
				t.Fatalf("reap: %+v %v", r, err)
			}
			applied := reservation.Change{ID: 1, Kind: reservation.ChangeState, Shop: shop, Token: "applied", State: reservation.StateReleased,
				Allocations: []reservation.Allocation{{Item: 1, Location: 1, Quantity: 1}}, ExpiresAt: time.Now().Add(time.Minute)}
			if n, err := b.s.Apply(c, []reservation.Change{applied}); err != nil || n != 1 {
				t.Fatalf("apply: %v %v", n, err)
			}

			var all []string
			pos := cp.Seq
			for page := 0; ; page++ {
				tokens, upto, err := b.s.Changed(c, shop, cp.ID, pos, 3)
				if err != nil {
					t.Fatal(err)
				}
				if upto < pos {
					t.Fatalf("page %d read up to %d, before %d", page, upto, pos)
				}
				all, pos = append(all, tokens...), upto
				if len(tokens) < 3 {
					break
				}
			}
			want := []string{"held", "released", "refused", "claimed", "due", "applied"}
			if !slices.Equal(all, want) {
				t.Errorf("logged %v, want %v (each token once, at its last change, in order)", all, want)
			}
			if tokens, _, err := b.s.Changed(c, shop, cp.ID, pos, 100); err != nil || len(tokens) != 0 {
				t.Errorf("read past the end: %v %v", tokens, err)
			}

			snap, err := b.s.Records(c, shop, append(slices.Clone(want), "before", "never"))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range snap.Holds {
				got = append(got, h.Token+" held")
			}
			for _, tb := range snap.Tombstones {
				got = append(got, tb.Token+" "+string(tb.State))
			}
			slices.Sort(got)
			wantRecs := []string{"applied released", "before held", "claimed claimed", "due expired", "held held", "refused refused", "released released"}
			if !slices.Equal(got, wantRecs) || len(snap.Tokens) != 8 {
				t.Errorf("records %v (tokens %v), want %v and \"never\" covered with nothing", got, snap.Tokens, wantRecs)
			}

			if err := b.s.EndCopy(c, shop, cp.ID); err != nil {
				t.Fatal(err)
			}
			if _, _, err := b.s.Changed(c, shop, cp.ID, 0, 10); !errors.Is(err, reservation.ErrCopyLost) {
				t.Errorf("the log of an ended copy: %v, want ErrCopyLost", err)
			}
			b.reserve(t, "after", time.Minute, line(1, 1, 1))
			if strings.Contains(b.dump(t), ":chg zset") {
				t.Errorf("a log after the copy ended:\n%s", b.dump(t))
			}
			if next, err := b.s.StartCopy(c, shop); err != nil || next.ID == cp.ID {
				t.Errorf("a new copy after the end: %+v %v, want a new id", next, err)
			}
		})
	}
}

// Only the decider's state is copied: a shop Redis does not decide
// refuses a copy.
func TestCopyOfAShopRedisDoesNotDecide(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new)
	c := ctx(t)
	if _, err := b.s.Yield(c, shop, 3); err != nil {
		t.Fatal(err)
	}
	_, err := b.s.StartCopy(c, shop)
	var nd *reservation.NotDeciderError
	if !errors.As(err, &nd) || nd.Fence.String() != "mysql@3" {
		t.Errorf("start copy of a shop MySQL decides: %v, want a NotDeciderError with mysql@3", err)
	}
}

// Tokens lists every token left unchanged while it walks, however many
// others leave the indexes meanwhile (a walk by rank would skip one for
// each that left before it): what a copy ahead relies on, since only the
// tokens that change are in its log.
func TestTokensMissNoUnchangedTokenWhileOthersLeave(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new)
	c := ctx(t)
	const n, leaving = 3000, 1500
	b.stock(t, 1, 1, n)
	var all []string
	for i := range n {
		token := fmt.Sprintf("t%04d", i)
		b.reserve(t, token, time.Duration(i+1)*time.Minute/100+time.Minute, line(1, 1, 1)) // earlier tokens expire first: lowest ranks
		all = append(all, token)
	}
	done := make(chan error, 1)
	go func() {
		for _, token := range all[:leaving] {
			if _, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: token}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var listed []string
	if err := b.s.Tokens(c, shop, func(page []string) error { listed = append(listed, page...); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, token := range listed {
		got[token] = true
	}
	missing := 0
	for _, token := range all[leaving:] {
		if !got[token] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of the %d tokens left unchanged were not listed", missing, n-leaving)
	}
}
