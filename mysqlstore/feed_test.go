package mysqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// The feed is read in batches of up to 10000 changes, bounds included:
// the relay's Config.Batch may be 10000 and reconcile reads a shop's
// pending changes with a limit of 10000, so a read at the bound must
// answer, not fail validation (the relay would stall and reconcile fail).
// One past it is refused.
func TestPendingReadsAFullBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, 10)
	b.stock(t, 1, 1, 5)
	for i := range 3 {
		if _, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: fmt.Sprint("t", i), Lines: one(1, 1), TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	n, _, err := b.s.Backlog(ctx)
	if err != nil || n < 3 {
		t.Fatalf("backlog: %d changes, %v; want the adjust and three reserves", n, err)
	}
	const full = 10000
	reads := map[string]func(limit int) ([]reservation.Change, error){
		"every shop": func(limit int) ([]reservation.Change, error) { return b.s.Pending(ctx, 0, limit) },
		"one shop":   func(limit int) ([]reservation.Change, error) { return b.s.Pending(ctx, shop, limit) },
		"all but one": func(limit int) ([]reservation.Change, error) {
			return b.s.PendingExcept(ctx, []int64{shop + 1}, limit)
		},
	}
	for name, read := range reads {
		cs, err := read(full)
		if err != nil || int64(len(cs)) != n {
			t.Errorf("%s, limit %d: %d changes, %v; want all %d", name, full, len(cs), err, n)
		}
		var ve *reservation.ValidationError
		if cs, err := read(full + 1); !errors.As(err, &ve) || cs != nil {
			t.Errorf("%s, limit %d: %d changes, %v; want a validation error", name, full+1, len(cs), err)
		}
	}
}
