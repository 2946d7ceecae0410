package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// The handoff sweeper's report of a pod (reservation.HandoffProgress) is
// kept in the pod's database (handoff_progress): every replica and every
// operator command reads the same report, whoever ran the sweep.

// SaveHandoffProgress writes the pod's handoff report.
func (s *Store) SaveHandoffProgress(ctx context.Context, p reservation.HandoffProgress) error {
	c, err := s.acquire(ctx, callerHandoff)
	if err != nil {
		return err
	}
	defer c.release()
	_, err = c.ExecContext(ctx, sqlProgressSave, p.FlagsVersion, p.Shops, p.Done, p.Pending, p.Failed,
		nullTime(p.OldestPending), p.Started.UTC(), nullTime(p.Finished), p.Updated.UTC(), p.Replica, p.LastError)
	if err != nil {
		return fmt.Errorf("mysqlstore: save the handoff progress: %w", err)
	}
	return nil
}

// LoadHandoffProgress reads the pod's handoff report; ok is false when no
// sweep has written one.
func (s *Store) LoadHandoffProgress(ctx context.Context) (p reservation.HandoffProgress, ok bool, err error) {
	c, err := s.acquire(ctx, callerHandoff)
	if err != nil {
		return reservation.HandoffProgress{}, false, err
	}
	defer c.release()
	var oldest, finished sql.NullTime
	err = c.QueryRowContext(ctx, sqlProgressRead).Scan(&p.FlagsVersion, &p.Shops, &p.Done, &p.Pending, &p.Failed,
		&oldest, &p.Started, &finished, &p.Updated, &p.Replica, &p.LastError)
	if isNoRows(err) {
		return reservation.HandoffProgress{}, false, nil
	}
	if err != nil {
		return reservation.HandoffProgress{}, false, fmt.Errorf("mysqlstore: read the handoff progress: %w", err)
	}
	p.OldestPending, p.Finished = oldest.Time, finished.Time
	return p, true, nil
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC()
}
