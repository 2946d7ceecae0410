package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/seed31b0e981/reservoir/reservation"
)

// What the Redis store reads from this store besides the ledger: a
// shop's holds (Drift) and which tokens the ledger has deducted (a legacy
// claim left in progress). They live in this file rather than sql.go so
// that this path can be reviewed as one piece.

// callerResync tags the statements Drift and Resync cause here.
const callerResync = "resync"

const (
	// The primary key (shop_id, token, item, location) serves both the
	// filter and the order.
	sqlShopHolds = `/*caller='resync'*/ SELECT token, inventory_item_id, location_id, quantity, expires_at, authority
  FROM reserved_quantities WHERE shop_id = ?
  ORDER BY token, inventory_item_id, location_id`
	sqlShopClaimsPrefix = `/*caller='resync'*/ SELECT token, allocations FROM reservation_claims
  WHERE shop_id = ? AND token IN (`
)

// claimsBatch bounds the placeholders of one claims lookup.
const claimsBatch = 500

// Holds lists a shop's holds, one per token in token order, each with its
// allocations sorted by (item, location). Expired holds the reaper has not
// returned yet are included: they still hold their units.
func (s *Store) Holds(ctx context.Context, shop int64) ([]reservation.Hold, error) {
	if shop <= 0 {
		return nil, &reservation.ValidationError{Field: "shop", Reason: fmt.Sprintf("must be a positive id, got %d", shop)}
	}
	c, err := s.acquire(ctx, callerResync)
	if err != nil {
		return nil, err
	}
	defer c.release()
	rows, err := c.QueryContext(ctx, sqlShopHolds, shop)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: holds of shop %d: %w", shop, err)
	}
	defer rows.Close()
	var out []reservation.Hold
	for rows.Next() {
		var token, auth string
		var a reservation.Allocation
		var exp sql.NullTime
		if err := rows.Scan(&token, &a.Item, &a.Location, &a.Quantity, &exp, &auth); err != nil {
			return nil, err
		}
		if n := len(out); n == 0 || out[n-1].Token != token {
			out = append(out, reservation.Hold{Shop: shop, Token: token, ExpiresAt: exp.Time, Authority: reservation.Authority(auth)})
		}
		h := &out[len(out)-1]
		h.Allocations = append(h.Allocations, a)
	}
	return out, rows.Err()
}

// Claims returns, for each of tokens that has a claim row, the allocations
// the ledger was deducted by. Tokens without a claim are absent.
func (s *Store) Claims(ctx context.Context, shop int64, tokens []string) (map[string][]reservation.Allocation, error) {
	if shop <= 0 {
		return nil, &reservation.ValidationError{Field: "shop", Reason: fmt.Sprintf("must be a positive id, got %d", shop)}
	}
	out := map[string][]reservation.Allocation{}
	if len(tokens) == 0 {
		return out, nil
	}
	c, err := s.acquire(ctx, callerResync)
	if err != nil {
		return nil, err
	}
	defer c.release()
	for start := 0; start < len(tokens); start += claimsBatch {
		batch := tokens[start:min(start+claimsBatch, len(tokens))]
		args := make([]any, 0, 1+len(batch))
		args = append(args, shop)
		for _, t := range batch {
			args = append(args, t)
		}
		if err := s.readClaims(ctx, c, shop, args, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) readClaims(ctx context.Context, c *conn, shop int64, args []any, out map[string][]reservation.Allocation) error {
	rows, err := c.QueryContext(ctx, sqlShopClaimsPrefix+repeatJoin("?", ",", len(args)-1)+")", args...)
	if err != nil {
		return fmt.Errorf("mysqlstore: claims of shop %d: %w", shop, err)
	}
	defer rows.Close()
	for rows.Next() {
		var token, doc string
		if err := rows.Scan(&token, &doc); err != nil {
			return err
		}
		var allocs []reservation.Allocation
		if err := json.Unmarshal([]byte(doc), &allocs); err != nil {
			return fmt.Errorf("mysqlstore: claim row of shop %d token %q: %w", shop, token, err)
		}
		reservation.SortAllocations(allocs)
		out[token] = allocs
	}
	return rows.Err()
}
