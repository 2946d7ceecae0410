package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/seed31b0e981/reservoir/mysqlstore"
)

func runReconcile(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("reconcile", "reconcile [--dsn DSN] [--shop ID] [--pool-cap N]", errOut)
	dsn := dsnFlag(fs)
	shop := fs.Int64("shop", 0, "only this shop (0: every shop)")
	poolCap := fs.Int64("pool-cap", 1000, "the pool cap the stores run with")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	if *dsn == "" {
		return fmt.Errorf("--dsn is required (or set RESERVOIR_DSN)")
	}
	if *shop < 0 {
		return fmt.Errorf("--shop must be a positive id or 0, got %d", *shop)
	}
	db, err := mysqlstore.Open(*dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	s, err := mysqlstore.New(mysqlstore.Config{DB: db, PoolCap: *poolCap})
	if err != nil {
		return err
	}
	drift, err := s.Reconcile(ctx, *shop)
	if err != nil {
		return err
	}
	for _, d := range drift {
		fmt.Fprintln(out, d)
	}
	fmt.Fprintf(out, "%d finding(s)\n", len(drift))
	if len(drift) > 0 {
		return fmt.Errorf("drift found")
	}
	return nil
}
