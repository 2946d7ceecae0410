package cell

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/breaker"
	"github.com/seed31b0e981/reservoir/reservation"
)

// deadSource is a MySQL whose holds and claims cannot be read; it counts
// the calls that reached it.
type deadSource struct{ calls *int }

func (d deadSource) Holds(context.Context, int64) ([]reservation.Hold, error) {
	*d.calls++
	return nil, errors.New("dial tcp 127.0.0.1:3306: connect: connection refused")
}

func (d deadSource) Claims(context.Context, int64, []string) (map[string][]reservation.Allocation, error) {
	*d.calls++
	return nil, errors.New("dial tcp 127.0.0.1:3306: connect: connection refused")
}

// A Redis call that asks the ledger about a claiming hold, with MySQL
// down: the failure counts against MySQL's breaker and not Redis's (under
// redis_only, Redis is the pod's only store: five such calls must not
// close the pod), and once MySQL's breaker is open the lookup is refused
// without reaching MySQL.
func TestLedgerLookupThroughRedisCountsAgainstMySQL(t *testing.T) {
	b, err := breaker.New(breaker.Config{Name: "pod-a mysql", Failures: 3, OpenFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	src := &guardedSource{s: deadSource{calls: &calls}, b: b}
	for i := range 3 {
		_, err := src.Claims(context.Background(), 42, []string{"cart"})
		if err == nil {
			t.Fatal("a dead MySQL answered")
		}
		// As redisstore wraps it on the way out of a Redis Get.
		seen := fmt.Errorf("redisstore: get shop 42 token %q: the hold is being claimed: look up the ledger's claim: %w", "cart", err)
		if storeFailed(seen) {
			t.Errorf("lookup %d: MySQL's failure seen through Redis counts against Redis's breaker: %v", i+1, seen)
		}
	}
	if st, _ := b.State(); st != breaker.Open {
		t.Fatalf("MySQL's breaker is %s after 3 failed lookups, want open", st)
	}
	_, err = src.Claims(context.Background(), 42, []string{"cart"})
	if !errors.Is(err, breaker.ErrOpen) || calls != 3 {
		t.Errorf("lookup with MySQL's breaker open: %v after %d calls reached MySQL, want ErrOpen and 3", err, calls)
	}
}
