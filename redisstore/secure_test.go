package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/internal/tlsclient"
	"github.com/seed31b0e981/reservoir/reservation/storetest"
)

// The conformance suite through a Redis as production runs one: TLS only,
// verified against the CA, logged in as an ACL user that may not
// administer the server (scripts/services redis-secure).
func TestConformanceSecure(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T) storetest.Harness {
		b := setup(t, testredis.NewSecure)
		return storetest.Harness{
			Store:  b.s,
			Ledger: b.ledger,
			HandOff: func(t *testing.T, shop int64) {
				if f, err := b.s.Yield(ctx(t), shop, 1); err != nil || f.Decider != "mysql" {
					t.Fatalf("yield shop %d: %v %v", shop, f, err)
				}
			},
		}
	})
}

// A client that gets the password, the TLS or the CA wrong is refused, with
// an error that says which; the server's default user (requirepass) is
// accepted with its own password; the ACL user cannot administer it.
func TestSecureRedisRefusesMistakes(t *testing.T) {
	t.Parallel()
	srv := testredis.SecureServer(t)
	for _, tc := range []struct {
		name string
		edit func(o *redis.Options)
		want string // in the error; "" for a PONG
	}{
		{"as configured", func(*redis.Options) {}, ""},
		{"the default user with requirepass", func(o *redis.Options) { o.Username, o.Password = "", srv.DefaultPassword }, ""},
		{"wrong password", func(o *redis.Options) { o.Password += "x" }, "WRONGPASS"},
		{"no password", func(o *redis.Options) { o.Username, o.Password = "", "" }, "NOAUTH"},
		{"system roots instead of the CA", func(o *redis.Options) {
			tc, err := tlsclient.Config("", "")
			if err != nil {
				t.Fatal(err)
			}
			o.TLSConfig = tc
		}, "certificate signed by unknown authority"},
		{"a server name the certificate does not carry", func(o *redis.Options) { o.TLSConfig.ServerName = "redis.example" }, "certificate is valid for"},
		// A TLS-only port reads a plain client's first command as a broken
		// handshake and hangs up: the client sees the connection end.
		{"no TLS", func(o *redis.Options) { o.TLSConfig = nil }, "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := srv.Options(t)
			tc.edit(o)
			o.DialTimeout, o.ReadTimeout = 5*time.Second, 5*time.Second
			c := redis.NewClient(o)
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := c.Ping(ctx).Err()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ping: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("ping: %v, want an error containing %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), srv.Password) {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}

	t.Run("the ACL user cannot administer", func(t *testing.T) {
		t.Parallel()
		c := redis.NewClient(srv.Options(t))
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.ConfigGet(ctx, "requirepass").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("CONFIG GET as %s: %v, want NOPERM", srv.User, err)
		}
	})
}
