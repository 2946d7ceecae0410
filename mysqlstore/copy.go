package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// A handoff to MySQL copies ahead (docs/ownership.md, section 3): while
// Redis keeps deciding the shop, its holds and tombstones are copied into
// MySQL part by part, the parts that changed meanwhile are copied again,
// and the cut-over (Copier.TakeOver) moves only the last changes with the
// fence. This file is MySQL's side.
//
// Two rules make the copy exact:
//   - While a copy is under way (the fence rows' copying column names it)
//     MySQL keeps no shadow hold of its own for the shop: shadow reserves
//     and releases are refused (see checkShadowFence). What MySQL holds is
//     only what was copied, plus what the ledger claimed (a legacy claim's
//     deduct goes on: it is the decider's).
//   - One copier per shop, across every replica: the copy runs on the
//     connection of a named lock, so a copier that lost it (its process
//     died, its connection broke) cannot write another part. Two copiers
//     would each be exact only against their own reads.

// copier is MySQL's side of one copy of a shop's state from Redis
// (reservation.Copier): it holds the shop's copy lease and writes the
// parts Redis gives it, on the lease's connection. Not safe for
// concurrent use; Close releases it.
type copier struct {
	s     *Store
	lease *lease
	shop  int64
	id    int64
}

var _ reservation.Copier = (*copier)(nil)

func copyLeaseName(shop int64) string { return "copy:" + strconv.FormatInt(shop, 10) }

// BeginCopy takes the shop's copy lease and marks the shop with copy id
// (Redis's, redisstore.Store.StartCopy): from its return on, MySQL keeps
// no shadow hold of its own for the shop, and every shadow write in flight
// has ended (the mark locks the fence rows for update). redis is the fence
// Redis decides the shop by. It returns MySQL's fence, and no Copier when
// MySQL decides the shop after Redis did (its fence names MySQL at a
// higher epoch than redis: a handoff finished first, nothing to copy). A
// fence naming MySQL at a lower epoch is one Redis took over by force
// (the kill switch redis_only, MySQL not answering): Redis's state is the
// truth since, and is copied over MySQL's. reservation.ErrCopyBusy:
// another copier holds the shop.
func (s *Store) BeginCopy(ctx context.Context, shop, id int64, redis reservation.Fence) (reservation.Copier, reservation.Fence, error) {
	if shop <= 0 || id <= 0 {
		return nil, reservation.Fence{}, &reservation.ValidationError{Field: "shop, copy", Reason: fmt.Sprintf("must be positive, got %d and %d", shop, id)}
	}
	lease, err := s.tryLease(ctx, copyLeaseName(shop))
	if err != nil {
		return nil, reservation.Fence{}, err
	}
	if lease == nil {
		return nil, reservation.Fence{}, fmt.Errorf("mysqlstore: copy shop %d: %w", shop, reservation.ErrCopyBusy)
	}
	var f reservation.Fence
	err = s.txOn(ctx, lease.c, callerCopy, func(tx *sql.Tx) error {
		cur, copying, err := lockFenceCopying(ctx, tx, shop)
		if err != nil {
			return err
		}
		f = cur
		if decidesAfter(cur, redis) || copying == id {
			return nil
		}
		if _, err := tx.ExecContext(ctx, sqlCopyMark, id, shop); err != nil {
			return fmt.Errorf("mysqlstore: copy shop %d: mark it: %w", shop, err)
		}
		return nil
	})
	if err != nil || decidesAfter(f, redis) {
		lease.Release()
		return nil, f, err
	}
	return &copier{s: s, lease: lease, shop: shop, id: id}, f, nil
}

// decidesAfter reports whether MySQL's fence says it decides the shop
// since after Redis's fence redis: the newer fence names the decider.
func decidesAfter(mysql, redis reservation.Fence) bool {
	return mysql.Decider == reservation.AuthorityMySQL && mysql.Epoch >= redis.Epoch
}

// Held walks the shop's held reservations in MySQL, handing each page
// (heldPage tokens, in token order) to each: a copy covers them with
// Redis's state, so that a hold MySQL has and Redis does not (a shadow
// hold of a cart Redis never held) is dropped. While the copy is under
// way no hold of MySQL's own appears (the shadow is refused), and the
// pages, by key, miss none that stays held. An error from each stops the
// walk.
func (c *copier) Held(ctx context.Context, each func(page []string) error) error {
	after := ""
	for {
		page, err := c.heldPage(ctx, after)
		if err != nil {
			return err
		}
		if len(page) > 0 {
			if err := each(page); err != nil {
				return err
			}
		}
		if len(page) < heldPage {
			return nil
		}
		after = page[len(page)-1]
	}
}

// heldPage is how many held tokens one statement of Held reads.
const heldPage = 1000

func (c *copier) heldPage(ctx context.Context, after string) ([]string, error) {
	rows, err := c.lease.c.QueryContext(ctx, sqlCopyHeld, c.shop, after, heldPage)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: copy shop %d: held: %w", c.shop, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Copy makes MySQL's reservations of part's tokens exactly Redis's (a
// partial snapshot; see copyIn), in one transaction that first checks, with
// a shared lock on the fence, that the shop is still marked with this copy
// and that Redis still decides it (reservation.ErrCopyLost otherwise,
// nothing written).
func (c *copier) Copy(ctx context.Context, part *reservation.Snapshot) error {
	if err := c.checkPart(part); err != nil {
		return err
	}
	return c.s.txOn(ctx, c.lease.c, callerCopy, func(tx *sql.Tx) error {
		var d string
		var epoch, copying int64
		err := tx.QueryRowContext(ctx, sqlCopyFence, c.shop).Scan(&d, &epoch, &copying)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("mysqlstore: copy shop %d: fence: %w", c.shop, err)
		}
		if isNoRows(err) || copying != c.id || reservation.Authority(d) == reservation.AuthorityMySQL {
			return fmt.Errorf("mysqlstore: copy %d of shop %d (fence %s@%d, copy %d): %w", c.id, c.shop, d, epoch, copying, reservation.ErrCopyLost)
		}
		return c.s.copyIn(ctx, tx, callerCopy, part)
	})
}

// TakeOver is the copy's cut-over, after Redis set its fence to
// mysql@epoch: in one transaction that locks the fence rows for update it
// copies the last part (every token that changed since the parts before)
// and sets the fence to mysql@epoch, ending the copy. Unless the fence
// already has an epoch of at least epoch (a handoff finished first: it
// returns that fence and writes nothing), it needs the shop still marked
// with this copy: reservation.ErrCopyLost otherwise.
func (c *copier) TakeOver(ctx context.Context, last *reservation.Snapshot, epoch int64) (reservation.Fence, error) {
	if err := c.checkPart(last); err != nil {
		return reservation.Fence{}, err
	}
	if epoch <= 0 {
		return reservation.Fence{}, &reservation.ValidationError{Field: "epoch", Reason: fmt.Sprintf("must be positive, got %d", epoch)}
	}
	var out reservation.Fence
	changed := false
	err := c.s.txOn(ctx, c.lease.c, callerHandoff, func(tx *sql.Tx) error {
		changed = false
		cur, copying, err := lockFenceCopying(ctx, tx, c.shop)
		if err != nil {
			return err
		}
		out = cur
		if cur.Epoch >= epoch {
			return nil // done already
		}
		if copying != c.id {
			return fmt.Errorf("mysqlstore: take over shop %d with copy %d (fence %s, copy %d): %w", c.shop, c.id, cur, copying, reservation.ErrCopyLost)
		}
		if err := c.s.copyIn(ctx, tx, callerHandoff, last); err != nil {
			return err
		}
		out = reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: epoch}
		if _, err := tx.ExecContext(ctx, sqlFenceSet, string(out.Decider), out.Epoch, c.shop); err != nil {
			return fmt.Errorf("mysqlstore: take over shop %d: %w", c.shop, err)
		}
		changed = true
		return nil
	})
	if err != nil {
		return reservation.Fence{}, err
	}
	c.s.countHandoff("take_over_copied", changed)
	return out, nil
}

// Refill tops up every pool of the shop from the ledger, one pool at a
// time, calling pause after each with how long it took: a copy takes the
// units its holds hold out of the pools, and a refill ahead of the
// cut-over keeps the first reserves MySQL decides from each refilling a
// pool themselves (whose snapshot sums every hold of the item: the larger
// the shop, the longer). It returns how many units it added.
func (c *copier) Refill(ctx context.Context, pause func(took time.Duration) error) (int64, error) {
	stock, err := c.s.Stock(ctx, &reservation.StockParams{Shop: c.shop})
	if err != nil {
		return 0, err
	}
	var added int64
	for _, l := range stock {
		start := time.Now()
		_, n, err := c.s.replenish(ctx, key{c.shop, l.Item, l.Location})
		if err != nil {
			return added, fmt.Errorf("mysqlstore: copy shop %d: refill: %w", c.shop, err)
		}
		added += n
		if err := pause(time.Since(start)); err != nil {
			return added, err
		}
	}
	return added, nil
}

func (c *copier) checkPart(part *reservation.Snapshot) error {
	if part == nil || part.Shop != c.shop || part.Tokens == nil {
		return &reservation.ValidationError{Field: "part", Reason: fmt.Sprintf("want a partial snapshot (Tokens set) of shop %d", c.shop)}
	}
	return c.s.validSnapshot(part)
}

// Close gives the copy lease up. The shop stays marked with the copy: a
// copier that takes it up later (this copy's id, which Redis keeps while
// its log lives) goes on with it; a fence change (a cut-over, a takeover,
// or a handoff to Redis at a newer epoch: what the handoff sweeper does
// with a copy the flags abandoned) ends it.
func (c *copier) Close() { c.lease.Release() }

// Fences returns every shop's fence, with the copy under way into it
// (shops without one are absent: Redis decides them at epoch 0).
func (s *Store) Fences(ctx context.Context) (map[int64]reservation.FenceState, error) {
	c, err := s.acquire(ctx, callerHandoff)
	if err != nil {
		return nil, err
	}
	defer c.release()
	rows, err := c.QueryContext(ctx, sqlFencesAll)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: fences: %w", err)
	}
	defer rows.Close()
	out := map[int64]reservation.FenceState{}
	for rows.Next() {
		var shop, epoch, copying int64
		var d string
		if err := rows.Scan(&shop, &d, &epoch, &copying); err != nil {
			return nil, err
		}
		out[shop] = reservation.FenceState{Fence: reservation.Fence{Decider: reservation.Authority(d), Epoch: epoch}, Copying: copying}
	}
	return out, rows.Err()
}
