// Package migrations holds reservoir's versioned SQL schema, embedded in the
// binary and applied with goose. It owns the schema and nothing else: no
// queries live here.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
)

//go:embed *.sql
var files embed.FS

// FS is the migration files.
var FS fs.FS = files

// Provider returns a goose provider for db (MySQL or MariaDB).
func Provider(db *sql.DB) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectMySQL, db, files)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration and returns the versions applied.
func Up(ctx context.Context, db *sql.DB) ([]int64, error) {
	p, err := Provider(db)
	if err != nil {
		return nil, err
	}
	res, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: up: %w", err)
	}
	applied := make([]int64, 0, len(res))
	for _, r := range res {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}
