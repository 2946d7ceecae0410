package redisstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/reservation"
)

// Rewrite checks the whole snapshot and ledger before it writes: a bad
// tombstone or ledger row is refused, naming it, wherever it stands, also
// after tombstones that are fine, and nothing is written. A rewrite
// replaces everything Redis holds of the shop: one that went through with
// a claimed tombstone at location 0, or another shop's ledger row, would
// leave quantities no ledger row matches, which the next reserves trust.
func TestRewriteChecksEveryTombstoneAndLedgerRow(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	c := ctx(t)
	exp := time.Now().Add(time.Hour)
	good := reservation.Tombstone{Token: "good", State: reservation.StateClaimed, Allocations: []reservation.Allocation{alloc(1, 1, 2)}, ExpiresAt: exp}
	atLocation0 := reservation.Tombstone{Token: "bad", State: reservation.StateClaimed, Allocations: []reservation.Allocation{alloc(1, 0, 2)}, ExpiresAt: exp}
	ledger := []reservation.StockLevel{{Shop: shop, Item: 1, Location: 1, Available: 10}}
	for _, tc := range []struct {
		name, field string
		tombs       []reservation.Tombstone
		ledger      []reservation.StockLevel
	}{
		{"a tombstone at location 0", "snapshot.tombstones[0].allocations[0]", []reservation.Tombstone{atLocation0}, ledger},
		{"a tombstone at location 0 after a good one", "snapshot.tombstones[1].allocations[0]", []reservation.Tombstone{good, atLocation0}, ledger},
		{"a good tombstone's token again", "snapshot.tombstones[1].token", []reservation.Tombstone{good, good}, ledger},
		{"another shop's ledger row after a good tombstone", "ledger[1].shop", []reservation.Tombstone{good},
			append(ledger[:1:1], reservation.StockLevel{Shop: shop + 1, Item: 1, Location: 1, Available: 5})},
	} {
		err := b.s.Rewrite(c, reservation.Snapshot{Shop: shop, Fence: reservation.NoFence, Tombstones: tc.tombs}, tc.ledger, nil)
		var ve *reservation.ValidationError
		if !errors.As(err, &ve) || ve.Field != tc.field {
			t.Errorf("rewrite with %s: %v, want a *ValidationError naming %q", tc.name, err, tc.field)
		}
	}
	if keys := b.r.Keys(t); len(keys) != 0 {
		t.Errorf("refused rewrites wrote %v", keys)
	}
	// The good tombstone alone goes through: the refusals were its
	// neighbours'.
	if err := b.s.Rewrite(c, reservation.Snapshot{Shop: shop, Fence: reservation.NoFence, Tombstones: []reservation.Tombstone{good}}, ledger, nil); err != nil {
		t.Fatalf("rewrite with the good tombstone: %v", err)
	}
	if _, err := b.s.Get(c, &reservation.GetParams{Shop: shop, Token: "good"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("get of the rewritten claimed tombstone: %v, want ErrAlreadyClaimed", err)
	}
}
