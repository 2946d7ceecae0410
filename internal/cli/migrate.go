package cli

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/internal/tlsclient"
	"github.com/seed31b0e981/reservoir/migrations"
	"github.com/seed31b0e981/reservoir/mysqlstore"
)

func runMigrate(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("migrate", "migrate up|status [--dsn DSN] [--tls-ca FILE] [--create]", out)
	dsn := dsnFlag(fs)
	caFile := fs.String("tls-ca", "", "verify the server's TLS certificate against this CA `FILE` (PEM), as the topology's mysql_tls_ca and control_tls_ca do")
	create := fs.Bool("create", false, "create the DSN's database first if it does not exist")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	actions := []string{"up", "status"}
	switch {
	case fs.NArg() == 0:
		return usagef("no action: give up or status")
	case !slices.Contains(actions, fs.Arg(0)):
		return unknownAction(fs.Arg(0), actions)
	case fs.NArg() > 1:
		return usagef("unexpected argument %q", fs.Arg(1))
	case *dsn == "":
		return usagef("no database: give --dsn DSN or set RESERVOIR_DSN")
	}
	if *caFile != "" {
		withTLS, err := tlsclient.MySQLDSN(*dsn, *caFile)
		if err != nil {
			return fmt.Errorf("--tls-ca: %w", err)
		}
		*dsn = withTLS
	}
	if *create {
		if err := createDatabase(ctx, *dsn); err != nil {
			return err
		}
	}
	db, err := mysqlstore.Open(*dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if fs.Arg(0) == "up" {
		applied, err := migrations.Up(ctx, db)
		if err != nil {
			return err
		}
		if len(applied) == 0 {
			fmt.Fprintln(out, "schema is up to date")
		}
		for _, v := range applied {
			fmt.Fprintf(out, "applied migration %05d\n", v)
		}
		return nil
	}
	p, err := migrations.Provider(db)
	if err != nil {
		return err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	for _, s := range st {
		fmt.Fprintf(out, "%05d  %-8s  %s\n", s.Source.Version, s.State, s.Source.Path)
	}
	return nil
}

// createDatabase creates the DSN's database on its server if missing. The
// name comes from the operator's DSN; it is quoted as an identifier.
func createDatabase(ctx context.Context, dsn string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("parse --dsn: %w", err)
	}
	name := cfg.DBName
	if name == "" {
		return fmt.Errorf("--create needs a database name in --dsn")
	}
	cfg.DBName = ""
	db, err := mysqlstore.Open(cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+quoteIdent(name)); err != nil { //sqlcheck:ok a database name cannot be a parameter; quoteIdent quotes it
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

func quoteIdent(s string) string {
	out := []byte{'`'}
	for i := 0; i < len(s); i++ {
		if s[i] == '`' {
			out = append(out, '`')
		}
		out = append(out, s[i])
	}
	return string(append(out, '`'))
}
