package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/pressly/goose/v3"

	"github.com/seed31b0e981/reservoir/migrations"
)

// NewSets is New with only the given migration sets applied: a pod's
// database (migrations.Pod), the control database (migrations.Control),
// or both. No set at all: an empty database, with no table.
func NewSets(t testing.TB, sets ...*migrations.Set) *DB {
	t.Helper()
	return newMigrated(t, ServerDSN(t), func(ctx context.Context, db *sql.DB) error {
		if len(sets) == 0 {
			return nil
		}
		_, err := migrations.Up(ctx, db, sets...)
		return err
	})
}

// NewLegacy is New with the database as a release before the split of the
// migration sets left it: the single set (both sets' migrations up to
// version, in the order of their numbers) applied by goose, recorded in
// goose_db_version (migrations.LegacyTable). For the tests of the upgrade.
func NewLegacy(t testing.TB, version int64) *DB {
	t.Helper()
	if version < 1 || version > migrations.LegacyLatest {
		t.Fatalf("testdb: the single set has versions 1 to %d, not %d", migrations.LegacyLatest, version)
	}
	return newMigrated(t, ServerDSN(t), func(ctx context.Context, db *sql.DB) error {
		p, err := LegacyProvider(db)
		if err != nil {
			return err
		}
		_, err = p.UpTo(ctx, version)
		return err
	})
}

// LegacyProvider is a goose provider of the single set of earlier
// releases on db: the two sets' migrations up to migrations.LegacyLatest,
// on goose's default version table, as those releases applied them.
func LegacyProvider(db *sql.DB) (*goose.Provider, error) {
	single := fstest.MapFS{}
	for _, s := range migrations.Sets() {
		for _, v := range s.Versions() {
			if v > migrations.LegacyLatest {
				continue
			}
			b, err := fs.ReadFile(s.FS(), s.Path(v))
			if err != nil {
				return nil, fmt.Errorf("testdb: %w", err)
			}
			single[s.Path(v)] = &fstest.MapFile{Data: b}
		}
	}
	return goose.NewProvider(goose.DialectMySQL, db, single)
}
