// Package testredis gives each test its own key prefix on the shared Redis
// servers that scripts/services starts (a standalone server, a 3-master
// cluster, and a standalone server that takes only TLS and authenticated
// clients), so tests run in parallel without seeing each other's keys.
//
// Clients are built the way redisstore requires (no resends) and shared by
// every test of a process; a test's keys are deleted when it ends.
package testredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/internal/testtier"
	"github.com/seed31b0e981/reservoir/internal/tlsclient"
)

// EnvAddr names the variable holding the standalone server's address
// (host:port). scripts/services prints it.
const EnvAddr = "RESERVOIR_REDIS_ADDR"

// EnvClusterAddrs names the variable holding the cluster's node addresses,
// comma separated. scripts/services prints it.
const EnvClusterAddrs = "RESERVOIR_REDIS_CLUSTER_ADDRS"

// EnvSecureAddr names the variable holding the address of the Redis that
// speaks only TLS and wants a password (redis-secure). EnvSecureUser and
// EnvSecurePassword name its ACL user and that user's password,
// EnvSecureDefaultPassword its requirepass (the default user's), and
// EnvTLSCA the CA file (PEM) its certificate chains to. scripts/services
// prints them all.
const (
	EnvSecureAddr            = "RESERVOIR_REDIS_SECURE_ADDR"
	EnvSecureUser            = "RESERVOIR_REDIS_SECURE_USER"
	EnvSecurePassword        = "RESERVOIR_REDIS_SECURE_PASSWORD"
	EnvSecureDefaultPassword = "RESERVOIR_REDIS_SECURE_DEFAULT_PASSWORD"
	EnvTLSCA                 = "RESERVOIR_TLS_CA"
)

// EnvKeep, when "1", keeps a test's keys for inspection.
const EnvKeep = "RESERVOIR_KEEP_REDIS"

// Redis is one test's view of a server: a shared client and a prefix no
// other test uses.
type Redis struct {
	// Client talks to the server (shared; do not close it).
	Client redis.UniversalClient
	// Prefix starts every key of this test; it has no braces.
	Prefix string
	// Cluster is true for the cluster.
	Cluster bool
}

type shared struct {
	once   sync.Once
	client redis.UniversalClient
	err    error
}

var standalone, cluster, secure shared

// Addr returns the standalone server's address or fails the test with what
// to run. Integration tests never skip silently: a missing server is a
// failure. Under -short the test skips, saying it needs Redis (testtier).
func Addr(t testing.TB) string {
	t.Helper()
	testtier.Needs(t, "Redis ("+EnvAddr+")")
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		t.Fatalf("%s is not set: start the servers with `eval \"$(scripts/services start mysql redis cluster)\"` or run `make test`", EnvAddr)
	}
	return addr
}

// ClusterAddrs returns the cluster's node addresses or fails the test
// (skips it under -short).
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	testtier.Needs(t, "a Redis Cluster ("+EnvClusterAddrs+")")
	v := os.Getenv(EnvClusterAddrs)
	if v == "" {
		t.Fatalf("%s is not set: start the cluster with `eval \"$(scripts/services start mysql redis cluster)\"` or run `make test`", EnvClusterAddrs)
	}
	return strings.Split(v, ",")
}

// Secure is how to reach the secure server.
type Secure struct {
	// Addr is its TLS port (host:port); it has no plain one.
	Addr string
	// User and Password log in as the ACL user, which may not administer
	// the server.
	User, Password string
	// DefaultPassword is the requirepass: the password of user "default".
	DefaultPassword string
	// CA is the CA file (PEM) the server's certificate chains to.
	CA string
}

// SecureServer returns the secure server's settings or fails the test with
// what to run (never a skip, but under -short).
func SecureServer(t testing.TB) Secure {
	t.Helper()
	testtier.Needs(t, "the TLS-only Redis ("+EnvSecureAddr+")")
	s := Secure{
		Addr: os.Getenv(EnvSecureAddr), User: os.Getenv(EnvSecureUser), Password: os.Getenv(EnvSecurePassword),
		DefaultPassword: os.Getenv(EnvSecureDefaultPassword), CA: os.Getenv(EnvTLSCA),
	}
	for _, v := range [][2]string{{EnvSecureAddr, s.Addr}, {EnvSecureUser, s.User}, {EnvSecurePassword, s.Password},
		{EnvSecureDefaultPassword, s.DefaultPassword}, {EnvTLSCA, s.CA}} {
		if v[1] == "" {
			t.Fatalf("%s is not set: start the TLS Redis with `eval \"$(scripts/services start mysql redis-secure)\"` or run `make test`", v[0])
		}
	}
	return s
}

// Options returns client options for the secure server as its ACL user,
// over TLS verified against the CA, never resending (what redisstore.New
// requires). Each call returns new options, for a test to spoil.
func (s Secure) Options(t testing.TB) *redis.Options {
	t.Helper()
	tc, err := tlsclient.Config(s.CA, "")
	if err != nil {
		t.Fatalf("%s: %v", EnvTLSCA, err)
	}
	return &redis.Options{Addr: s.Addr, Username: s.User, Password: s.Password, TLSConfig: tc, MaxRetries: -1}
}

// NewSecure returns a fresh prefix on the secure server, through a shared
// client that logs in as the ACL user over verified TLS.
func NewSecure(t testing.TB) *Redis {
	t.Helper()
	s := SecureServer(t)
	o := s.Options(t) // outside get's once: a failure there must stop this test only
	o.PoolSize = 256
	c := secure.get(t, func() redis.UniversalClient { return redis.NewClient(o) }, s.Addr+" (TLS, user "+s.User+")")
	return newPrefix(t, c, false)
}

// New returns a fresh prefix on the standalone server.
func New(t testing.TB) *Redis {
	t.Helper()
	addr := Addr(t)
	c := standalone.get(t, func() redis.UniversalClient {
		// MaxRetries -1: the client never resends (what redisstore.New
		// requires). PoolSize: parallel tests run many concurrent callers.
		return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 256})
	}, addr)
	return newPrefix(t, c, false)
}

// NewCluster returns a fresh prefix on the cluster.
func NewCluster(t testing.TB) *Redis {
	t.Helper()
	addrs := ClusterAddrs(t)
	c := cluster.get(t, func() redis.UniversalClient {
		// MaxRedirects -1: the cluster client's redirect loop is also what
		// resends after a network error.
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, MaxRedirects: -1, PoolSize: 256})
	}, strings.Join(addrs, ","))
	return newPrefix(t, c, true)
}

func (s *shared) get(t testing.TB, build func() redis.UniversalClient, where string) redis.UniversalClient {
	t.Helper()
	s.once.Do(func() {
		s.client = build()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if cc, ok := s.client.(*redis.ClusterClient); ok {
			s.err = cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
		} else {
			s.err = s.client.Ping(ctx).Err()
		}
	})
	if s.err != nil {
		t.Fatalf("connect to redis at %s: %v", where, s.err)
	}
	return s.client
}

// ForExample is New for runnable examples, which have no *testing.T: it
// panics on failure and returns the cleanup to defer (it deletes the keys
// and closes the client).
func ForExample() (*Redis, func()) {
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		panic(EnvAddr + " is not set: start the servers with `eval \"$(scripts/services start)\"`")
	}
	r := &Redis{Client: redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1}), Prefix: randomPrefix()}
	return r, func() {
		_ = r.deleteKeys(context.Background())
		_ = r.Client.Close()
	}
}

func randomPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "rsvtest:" + hex.EncodeToString(b[:]) + ":"
}

func newPrefix(t testing.TB, c redis.UniversalClient, isCluster bool) *Redis {
	t.Helper()
	r := &Redis{Client: c, Prefix: randomPrefix(), Cluster: isCluster}
	t.Cleanup(func() {
		if os.Getenv(EnvKeep) == "1" {
			t.Logf("kept redis keys %s*", r.Prefix)
			return
		}
		if err := r.deleteKeys(context.Background()); err != nil {
			t.Errorf("delete redis keys %s*: %v", r.Prefix, err)
		}
	})
	return r
}

// Keys returns every key of this test, on every node.
func (r *Redis) Keys(t testing.TB) []string {
	t.Helper()
	var mu sync.Mutex
	var out []string
	err := r.eachNode(context.Background(), func(ctx context.Context, c *redis.Client) error {
		ks, err := scan(ctx, c, r.Prefix+"*")
		mu.Lock()
		out = append(out, ks...)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatalf("list redis keys %s*: %v", r.Prefix, err)
	}
	return out
}

func (r *Redis) deleteKeys(ctx context.Context) error {
	return r.eachNode(ctx, func(ctx context.Context, c *redis.Client) error {
		ks, err := scan(ctx, c, r.Prefix+"*")
		if err != nil || len(ks) == 0 {
			return err
		}
		// One UNLINK per key: on a cluster, keys of different slots cannot
		// share a command even on one node.
		_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range ks {
				p.Unlink(ctx, k)
			}
			return nil
		})
		return err
	})
}

func (r *Redis) eachNode(ctx context.Context, fn func(ctx context.Context, c *redis.Client) error) error {
	if cc, ok := r.Client.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, fn)
	}
	c, ok := r.Client.(*redis.Client)
	if !ok {
		return fmt.Errorf("testredis: unexpected client %T", r.Client)
	}
	return fn(ctx, c)
}

func scan(ctx context.Context, c *redis.Client, match string) ([]string, error) {
	var out []string
	var cursor uint64
	for {
		ks, next, err := c.Scan(ctx, cursor, match, 1000).Result()
		if err != nil {
			return nil, err
		}
		out = append(out, ks...)
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}
