package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/reservation/storetest"
)

// The conformance suite over TLS verified against the test CA, as a user
// the server accepts only over TLS (scripts/services): every statement,
// the migrations included, went over TLS or was refused.
func TestConformanceTLS(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T) storetest.Harness {
		db := testdb.NewTLS(t)
		var name, cipher string
		if err := db.QueryRow("SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil || cipher == "" {
			t.Fatalf("the store's connection is not TLS: cipher %q, %v", cipher, err)
		}
		s, err := mysqlstore.New(mysqlstore.Config{DB: db.DB, PoolCap: 20, Limits: reservation.Limits{MaxQuantity: 20}})
		if err != nil {
			t.Fatal(err)
		}
		return storetest.Harness{Store: s, Ledger: s, Decide: decide(s), HandOff: handOff(s)}
	})
}

// The TLS user is refused without TLS, and TLS verified against the
// wrong roots is refused before a password is sent.
func TestTLSRefusesMistakes(t *testing.T) {
	t.Parallel()
	verified := testdb.TLSServerDSN(t)
	cfg, err := mysql.ParseDSN(verified)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, tls, want string
	}{
		{"verified TLS", cfg.TLSConfig, ""},
		{"no TLS", "false", "Access denied for user"},
		{"the system's roots", "true", "certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := cfg.Clone()
			c.TLS, c.TLSConfig = nil, tc.tls
			dsn, err := mysqlstore.DSN(c.FormatDSN())
			if err != nil {
				t.Fatal(err)
			}
			err = ping(t, dsn)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ping: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("ping: %v, want an error containing %q", err, tc.want)
			}
			if err != nil && cfg.Passwd != "" && strings.Contains(err.Error(), cfg.Passwd) {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

func ping(t *testing.T, dsn string) error {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = db.PingContext(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ping timed out: is %s's server up?", testdb.EnvTLSDSN)
	}
	return err
}
