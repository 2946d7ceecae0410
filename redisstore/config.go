package redisstore

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Config configures a Store. New applies WithDefaults, then Validate.
type Config struct {
	// Client is the Redis connection: a *redis.Client (standalone, or
	// Sentinel failover) or a *redis.ClusterClient. Required.
	//
	// It must never resend a command: go-redis by default resends after a
	// lost reply or a read timeout, which would run a script a second time
	// without the caller knowing. Build it with NewClient, or with
	// MaxRetries: -1 (and, for a cluster, MaxRedirects: -1). New refuses a
	// *redis.Client or *redis.ClusterClient whose options allow a resend;
	// another implementation of redis.UniversalClient cannot be inspected
	// and is the caller's responsibility.
	Client redis.UniversalClient
	// Ledger is the stock ledger (mysqlstore.Store): Claim as authority
	// deducts it, Adjust as authority changes it, Drift and Resync read it.
	// Required.
	Ledger reservation.Ledger
	// Source is the MySQL store's view of holds and claims, which Drift
	// and Resync compare with and rebuild from. Optional: without it they
	// return ErrNoSource; every other operation works.
	Source ResyncSource
	// Prefix starts every key the store writes, so that several stores (or
	// tests) share one Redis without seeing each other. It must not contain
	// '{' or '}': the shop's hash tag must be the first braces of a key.
	// Default: "reservoir:".
	Prefix string
	// Limits bound input. Default: reservation.DefaultLimits. Keep them
	// within the ledger's (mysqlstore lowers MaxQuantity to its PoolCap): a
	// hold the ledger refuses to deduct cannot be claimed.
	Limits reservation.Limits
	// Registerer receives the store's metrics. Default: a private registry
	// (metrics are kept but not exported). Never the global one.
	Registerer prometheus.Registerer
	// ClaimedTTL is how long the marker of a claimed token lives. While it
	// does, Reserve and Release of the token answer ErrAlreadyClaimed and a
	// repeated Claim answers Replayed from Redis alone; after it, the
	// token is unknown to Redis (a repeated authority Claim then answers
	// ErrNotFound; the ledger's claims row still prevents a second
	// deduction). It must outlive any hold: at least Limits.MaxTTL.
	// Default: 7 days.
	ClaimedTTL time.Duration
	// ReapBatch is the default number of hold records one Reap returns.
	// Default: 500.
	ReapBatch int
}

// DefaultPrefix is the key prefix used when Config.Prefix is empty.
const DefaultPrefix = "reservoir:"

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	c.Limits = c.Limits.WithDefaults()
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.ClaimedTTL == 0 {
		c.ClaimedTTL = 7 * 24 * time.Hour
	}
	if c.ReapBatch == 0 {
		c.ReapBatch = 500
	}
	return c
}

// Validate reports a setting that cannot work, naming the field.
func (c Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("redisstore: Config.Client is required (see NewClient)")
	case c.Ledger == nil:
		return errors.New("redisstore: Config.Ledger is required: claims and adjusts go through the MySQL ledger")
	case strings.ContainsAny(c.Prefix, "{}"):
		return fmt.Errorf("redisstore: Config.Prefix %q must not contain '{' or '}': the shop's hash tag must be the first braces of every key", c.Prefix)
	case c.ClaimedTTL < c.Limits.MaxTTL:
		return fmt.Errorf("redisstore: Config.ClaimedTTL %s is shorter than Limits.MaxTTL %s: a claimed marker must outlive any hold", c.ClaimedTTL, c.Limits.MaxTTL)
	case c.ReapBatch < 1 || c.ReapBatch > 100000:
		return fmt.Errorf("redisstore: Config.ReapBatch must be between 1 and 100000, got %d", c.ReapBatch)
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("redisstore: Config.Limits: %w", err)
	}
	return checkClient(c.Client)
}

// NewClient builds a client the store accepts from o: o with every resend
// turned off. MaxRetries -1 stops a standalone or failover client from
// resending; MaxRedirects -1 does the same for a cluster client, whose
// redirect loop also resends after network errors, whatever MaxRetries
// says. The price on a cluster: a MOVED or ASK answer (a slot being
// migrated) fails the call instead of being followed. That is safe (the
// script did not run there) and the client reloads the slot map, so the
// caller's retry, which every script here makes harmless, lands on the
// right node.
func NewClient(o *redis.UniversalOptions) redis.UniversalClient {
	opts := *o
	opts.MaxRetries = -1
	opts.MaxRedirects = -1
	return redis.NewUniversalClient(&opts)
}

// checkClient refuses a client that would resend a command. Options hold
// the values after go-redis's defaults: -1 has become 0 and 0 has become 3.
func checkClient(c redis.UniversalClient) error {
	switch c := c.(type) {
	case *redis.Client:
		if n := c.Options().MaxRetries; n > 0 {
			return fmt.Errorf("redisstore: Config.Client resends commands (MaxRetries is %d): a script whose reply was lost would run twice; build it with MaxRetries: -1 (see NewClient)", n)
		}
	case *redis.ClusterClient:
		o := c.Options()
		if o.MaxRedirects > 0 {
			return fmt.Errorf("redisstore: Config.Client is a cluster client that resends commands after network errors (MaxRedirects is %d); build it with MaxRedirects: -1 (see NewClient)", o.MaxRedirects)
		}
		if o.MaxRetries > 0 {
			return fmt.Errorf("redisstore: Config.Client is a cluster client whose nodes resend commands (MaxRetries is %d); build it with MaxRetries: -1 (see NewClient)", o.MaxRetries)
		}
	case *redis.Ring:
		return errors.New("redisstore: Config.Client is a Ring: the store needs a standalone, failover or cluster client")
	}
	return nil
}
