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
	// deducts it, Adjust changes it, Drift reads it. Required.
	Ledger reservation.Ledger
	// Source is the MySQL store's view of holds and claims
	// (mysqlstore.Store). Claim reads it to finish a claim whose hold is
	// gone, Release and Reap to resolve a claiming hold older than
	// ClaimGrace, Drift to compare with. Optional: without it Drift returns
	// ErrNoSource, Release answers ErrClaimInProgress for such a hold, and
	// Reap expires it unchecked; every other operation works.
	Source Source
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
	// TombstoneTTL is how long a token's tombstone (claimed, released,
	// expired, refused) lives. While it does, the token answers from it
	// (docs/ownership.md, section 5) and no late write resurrects the
	// reservation; after it, Redis has forgotten the token. It must outlive
	// any hold: at least Limits.MaxTTL. Default:
	// reservation.DefaultTombstoneTTL.
	TombstoneTTL time.Duration
	// ClaimGrace is how long a hold whose legacy claim started is left to
	// that claim: a release answers ErrClaimInProgress and the reaper
	// skips it. After it, both ask the ledger (Source) whether the claim
	// happened. It must outlast a ledger deduction, retries included.
	// Default: 15s.
	ClaimGrace time.Duration
	// ReapBatch is the default number of hold records one Reap returns.
	// Default: 500.
	ReapBatch int
}

// DefaultPrefix is the key prefix used when Config.Prefix is empty.
const DefaultPrefix = "reservoir:"

// DefaultClaimGrace is Config.ClaimGrace's default.
const DefaultClaimGrace = 15 * time.Second

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	c.Limits = c.Limits.WithDefaults()
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.TombstoneTTL == 0 {
		c.TombstoneTTL = reservation.DefaultTombstoneTTL
	}
	if c.ClaimGrace == 0 {
		c.ClaimGrace = DefaultClaimGrace
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
	case c.TombstoneTTL < c.Limits.MaxTTL:
		return fmt.Errorf("redisstore: Config.TombstoneTTL %s is shorter than Limits.MaxTTL %s: a tombstone must outlive any hold", c.TombstoneTTL, c.Limits.MaxTTL)
	case c.ClaimGrace < time.Millisecond:
		return fmt.Errorf("redisstore: Config.ClaimGrace must be at least 1ms, got %s: a release must not give back a hold whose claim is under way", c.ClaimGrace)
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
