package mysqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/seed31b0e981/reservoir/reservation"
)

// lease is a named lock held by one connection of this store's database:
// while one process holds it, no other can take it (one relay per pod,
// however many replicas run). The server releases it when the connection
// ends, so a process that dies gives it up at once.
type lease struct {
	c    *conn
	name string
}

// TryLease takes the named lock on this database if nobody holds it, and
// returns nil (and no error) if somebody does. The name is scoped to the
// database, so pods on one server do not contend.
func (s *Store) TryLease(ctx context.Context, name string) (reservation.Lease, error) {
	l, err := s.tryLease(ctx, name)
	if l == nil {
		// An untyped nil: a nil *lease in the interface would read as a
		// lease taken.
		return nil, err
	}
	return l, err
}

// tryLease is TryLease with the lease's connection, which a copy writes
// on (Copier): work that must stop with the lease runs on it.
func (s *Store) tryLease(ctx context.Context, name string) (*lease, error) {
	if name == "" || strings.ContainsAny(name, "\x00") {
		return nil, fmt.Errorf("mysqlstore: lease name %q: want a non-empty name", name)
	}
	c, err := s.acquire(ctx, callerLease)
	if err != nil {
		return nil, err
	}
	var got *int64
	if err := c.QueryRowContext(ctx, sqlLeaseGet, name).Scan(&got); err != nil {
		c.release()
		return nil, fmt.Errorf("mysqlstore: take lease %s: %w", name, err)
	}
	if got == nil || *got != 1 {
		c.release()
		return nil, nil
	}
	return &lease{c: c, name: name}, nil
}

// Held reports whether the lease is still held: its connection answers and
// still owns the lock.
func (l *lease) Held(ctx context.Context) bool {
	var mine *int64
	if err := l.c.QueryRowContext(ctx, sqlLeaseMine, l.name).Scan(&mine); err != nil {
		return false
	}
	return mine != nil && *mine == 1
}

// Release gives the lease up and returns its connection.
func (l *lease) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), leaseReleaseTimeout)
	defer cancel()
	_, _ = l.c.ExecContext(ctx, sqlLeaseRelease, l.name)
	l.c.release()
}
