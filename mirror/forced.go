package mirror

import (
	"context"
	"fmt"

	"github.com/seed31b0e981/reservoir/reservation"
)

// A kill switch to redis_only takes a shop for Redis even when MySQL does
// not answer (toRedis, force): Redis's fence moves, MySQL's cannot. When
// MySQL answers again its fence still names MySQL, at an epoch below
// Redis's, and a call asking MySQL as decider would be answered from what
// MySQL had before Redis took over: holds released since still held,
// holds made since unknown. So the shop is noted in Redis first
// (redisstore NoteForced), and once MySQL answers the handoff sweeper
// moves MySQL's fence off it (fenceOff: MySQL yields at Redis's epoch)
// before anything else. Until then the controller refuses to release the
// kill switch back to MySQL (ForcedPending, through the cell's
// StoreChecker).

// fenceOff moves MySQL's fence off every shop noted as taken by force,
// then clears the note. A shop Redis handed to MySQL since (a copy's
// cut-over: both fences name MySQL at a newer epoch) needs nothing.
func (m *Mirror) fenceOff(ctx context.Context) error {
	shops, err := m.cfg.Redis.Forced(ctx)
	if err != nil {
		return fmt.Errorf("mirror: fence MySQL off the shops Redis took by force: %w", err)
	}
	for _, shop := range shops {
		rf, err := m.cfg.Redis.Fence(ctx, shop)
		if err != nil {
			return fmt.Errorf("mirror: fence MySQL off shop %d: %w", shop, err)
		}
		if rf.Decider == reservation.AuthorityRedis && rf.Epoch > 0 {
			mf, err := m.cfg.MySQL.Yield(ctx, shop, rf.Epoch)
			if err != nil {
				return fmt.Errorf("mirror: fence MySQL off shop %d (Redis took it at %s): %w", shop, rf, err)
			}
			m.log.Warn("mirror: MySQL's fence moved off a shop Redis took by force while MySQL did not answer",
				"shop", shop, "redis", rf.String(), "mysql", mf.String())
		}
		if err := m.cfg.Redis.FencedOff(ctx, shop); err != nil {
			return err
		}
	}
	return nil
}

// ForcedPending counts the shops Redis took by force whose MySQL fence has
// not been moved off them yet: while there are any, a switch back to MySQL
// would let MySQL decide them from stale state (see fenceOff).
func (m *Mirror) ForcedPending(ctx context.Context) (int, error) {
	shops, err := m.cfg.Redis.Forced(ctx)
	return len(shops), err
}
