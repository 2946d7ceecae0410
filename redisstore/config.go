package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"weak"

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
	// without the caller knowing. Build it with NewClient (a cluster client
	// built so follows MOVED and ASK but never resends a script after a
	// network error), or with MaxRetries: -1 (and, for a cluster,
	// MaxRedirects: -1, which also stops redirects being followed). New
	// refuses a *redis.Client or *redis.ClusterClient whose options allow a
	// resend; another implementation of redis.UniversalClient cannot be
	// inspected and is the caller's responsibility.
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
	// InlineClaimCleanup makes the legacy claim remove the hold and leave
	// the claimed tombstone (its cleanup) before it answers, one more
	// round trip on the caller's path. Without it (the default), when a
	// Source is set, the claim answers as soon as the ledger recorded it
	// and Redis follows through the ledger's change feed (the relay's
	// Apply), as it already did when a cleanup was lost; until then a
	// read, release or repeated reserve that finds the claiming hold asks
	// the ledger and answers as claimed. Set it for a store whose ledger's
	// changes no relay applies (without a Source the cleanup is always
	// inline: nothing could tell a claimed hold from one being claimed).
	InlineClaimCleanup bool
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
// resending.
//
// A cluster client's redirect loop (up to MaxRedirects times) both follows
// MOVED and ASK and resends after a network error, whatever MaxRetries
// says. Following a redirect is safe: the node that answered it did not
// run the script. So NewClient keeps the loop (MaxRedirects: o's, or 8
// when unset, enough for TRYAGAIN while a slot's keys are half moved) and
// adds a hook that marks each script NoRetry as soon as it may have run:
// go-redis still follows its redirects, and resends it after an error
// reply that says it did not run (TRYAGAIN, CLUSTERDOWN, LOADING), but
// never after a network error or a timeout. During a reshard or a
// failover, scripts find their slot's new node instead of failing.
func NewClient(o *redis.UniversalOptions) redis.UniversalClient {
	opts := *o
	opts.MaxRetries = -1
	if opts.MaxRedirects == 0 {
		opts.MaxRedirects = 8
	}
	c := redis.NewUniversalClient(&opts)
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.AddHook(scriptsOnce{})
		following.Store(weak.Make(cc), true)
	}
	return c
}

// following holds the cluster clients NewClient built: they follow
// redirects without resending a script, so New accepts their MaxRedirects.
// Held weakly, so a closed client is still collected; a handful of keys
// per process.
var following sync.Map

// scriptsOnce is the hook NewClient puts on a cluster client: it hands
// go-redis each script (EVAL, EVALSHA and their _RO forms) as a sentOnce,
// alone or in a pipeline. Other commands go as they are: the store's are
// reads and SADDs of a shop, which a resend cannot change, and some
// (SCRIPT LOAD, sent to every node) are only answered right as themselves.
type scriptsOnce struct{}

func (scriptsOnce) DialHook(next redis.DialHook) redis.DialHook { return next }

func (scriptsOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return next(ctx, once(cmd)) }
}

func (scriptsOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		marked := make([]redis.Cmder, len(cmds))
		for i, cmd := range cmds {
			marked[i] = once(cmd)
		}
		return next(ctx, marked)
	}
}

func once(cmd redis.Cmder) redis.Cmder {
	switch cmd.Name() {
	case "eval", "evalsha", "eval_ro", "evalsha_ro":
		return sentOnce{cmd}
	}
	return cmd
}

// sentOnce is a command go-redis may send again only while it is sure the
// command did not run. Its reply lands in the command it wraps.
type sentOnce struct{ redis.Cmder }

// NoRetry is what go-redis asks after a failure before resending (redirects
// are followed without asking). An error reply means the server refused
// the command, and the replies go-redis resends after (TRYAGAIN,
// CLUSTERDOWN, LOADING, READONLY, MASTERDOWN) come before a script writes
// anything; any other failure (a lost connection, a timeout) may come
// after the script ran.
func (c sentOnce) NoRetry() bool {
	var reply redis.Error
	return !errors.As(c.Err(), &reply)
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
		if _, ok := following.Load(weak.Make(c)); o.MaxRedirects > 0 && !ok {
			return fmt.Errorf("redisstore: Config.Client is a cluster client that resends commands after network errors (MaxRedirects is %d); build it with NewClient, which follows redirects without resending, or with MaxRedirects: -1", o.MaxRedirects)
		}
		if o.MaxRetries > 0 {
			return fmt.Errorf("redisstore: Config.Client is a cluster client whose nodes resend commands (MaxRetries is %d); build it with MaxRetries: -1 (see NewClient)", o.MaxRetries)
		}
	case *redis.Ring:
		return errors.New("redisstore: Config.Client is a Ring: the store needs a standalone, failover or cluster client")
	}
	return nil
}
