package mysqlstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// A pool lets Config.PoolConcurrency reserve transactions in at once; the
// next waits in the store, while another pool's reserves go on.
func TestPoolConcurrencyQueuesInTheStore(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	s, err := mysqlstore.New(mysqlstore.Config{DB: db.DB, PoolCap: 10, PoolConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	decide(s)(t, shop)
	ctx := context.Background()
	for _, item := range []int64{1, 2} {
		n := int64(10)
		if _, err := s.Adjust(ctx, &reservation.AdjustParams{Shop: shop, Item: item, Location: 1, Available: &n}); err != nil {
			t.Fatal(err)
		}
	}
	inside, release := make(chan struct{}), make(chan struct{})
	var entered atomic.Int32
	mysqlstore.SetBeforeHoldInsert(s, func() {
		if entered.Add(1) == 1 {
			close(inside)
			<-release
		}
	})
	reserve := func(token string, item int64) error {
		_, err := s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, Lines: one(item, 1), TTL: time.Minute})
		return err
	}
	first := make(chan error, 1)
	go func() { first <- reserve("a", 1) }()
	<-inside
	second := make(chan error, 1)
	go func() { second <- reserve("b", 1) }()
	// Another pool is not held up.
	if err := reserve("c", 2); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // room for "b" to get in, which it must not
	if n := entered.Load(); n != 2 {
		t.Errorf("%d reserve transactions took units while item 1's first was in, want 2 (that one and item 2's)", n)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if n := entered.Load(); n != 3 {
		t.Errorf("%d reserve transactions in all, want 3", n)
	}
}
