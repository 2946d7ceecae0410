package mysqlstore

import (
	"context"
	"fmt"
	"strings"
)

// Lease is a named lock held by one connection of this store's database:
// while one process holds it, no other can take it (one relay per pod,
// however many replicas run). The server releases it when the connection
// ends, so a process that dies gives it up at once.
type Lease struct {
	c    *conn
	name string
}

// TryLease takes the named lock on this database if nobody holds it, and
// returns nil (and no error) if somebody does. The name is scoped to the
// database, so pods on one server do not contend.
func (s *Store) TryLease(ctx context.Context, name string) (*Lease, error) {
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
	return &Lease{c: c, name: name}, nil
}

// Held reports whether the lease is still held: its connection answers and
// still owns the lock.
func (l *Lease) Held(ctx context.Context) bool {
	var mine *int64
	if err := l.c.QueryRowContext(ctx, sqlLeaseMine, l.name).Scan(&mine); err != nil {
		return false
	}
	return mine != nil && *mine == 1
}

// Release gives the lease up and returns its connection.
func (l *Lease) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), leaseReleaseTimeout)
	defer cancel()
	_, _ = l.c.ExecContext(ctx, sqlLeaseRelease, l.name)
	l.c.release()
}
