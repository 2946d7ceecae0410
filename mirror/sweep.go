package mirror

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Handoffs happen when the flags change, not when a call happens to
// arrive (docs/ownership.md, section 3): the sweeper of a pod (one active
// per pod across every replica, elected with a MySQL named lock) watches
// the flags' version and, when it changes, hands every shop whose fences
// disagree with the flags off to the store the flags name, quiet shops
// included. It keeps no state a crash loses: a sweep is "compare every
// shop's fences with the flags, hand off the ones that differ", so the
// replica that takes the lease over after a crash simply sweeps again.

// Wanted says which store the flags want deciding a shop, at which epoch
// (the flags' version), and whether a handoff to Redis may be forced (the
// kill switch redis_only): what a call on the shop would hand it off to.
// An error means the flags cannot be read: nothing is handed off.
// dualwrite.Facade.Wanted is one.
type Wanted func(ctx context.Context, shop int64) (to reservation.Authority, epoch int64, force bool, err error)

// Progress is the sweeper's report of a pod, kept in the pod's database
// (Mirror.Progress reads it).
type Progress = reservation.HandoffProgress

// SweeperConfig configures RunSweeper.
type SweeperConfig struct {
	// Wanted answers what the flags want for each shop. Required.
	Wanted Wanted
	// Version returns the flags version this replica applies, false while
	// none is loaded (no sweep then). A new version starts a sweep.
	// Required.
	Version func(ctx context.Context) (int64, bool)
	// Replica names this replica in the report. Default: host name and
	// process id.
	Replica string
	// Concurrency bounds the handoffs under way at once (each holds a
	// MySQL connection while it copies). Default: 4.
	Concurrency int
	// Interval is how often the version is checked and the shops still
	// pending retried. Default: 100ms.
	Interval time.Duration
	// Rescan is how often every shop is compared again without a new
	// version (a shop whose first stock came since; a handoff a replica
	// with older flags undid). Default: 30s.
	Rescan time.Duration
}

// WithDefaults returns c with zero fields set to their defaults.
func (c SweeperConfig) WithDefaults() SweeperConfig {
	if c.Replica == "" {
		host, _ := os.Hostname()
		c.Replica = host + ":" + strconv.Itoa(os.Getpid())
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.Interval == 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.Rescan == 0 {
		c.Rescan = 30 * time.Second
	}
	return c
}

// Validate reports a setting that cannot work, naming the field.
func (c SweeperConfig) Validate() error {
	switch {
	case c.Wanted == nil:
		return errors.New("mirror: SweeperConfig.Wanted is required")
	case c.Version == nil:
		return errors.New("mirror: SweeperConfig.Version is required")
	case c.Concurrency < 1 || c.Concurrency > 64:
		return fmt.Errorf("mirror: SweeperConfig.Concurrency must be between 1 and 64, got %d", c.Concurrency)
	case c.Interval <= 0 || c.Rescan <= 0:
		return fmt.Errorf("mirror: SweeperConfig.Interval (%s) and Rescan (%s) must be positive", c.Interval, c.Rescan)
	}
	return nil
}

// RunSweeper runs the pod's handoff sweeper until ctx ends: it becomes the
// pod's active sweeper when no other replica is (a MySQL named lock, as
// the relay), and then sweeps whenever the flags' version changes, retries
// the shops still pending every Interval, and compares every shop again
// every Rescan. It returns ctx's error, or a configuration error at once.
func (m *Mirror) RunSweeper(ctx context.Context, cfg SweeperConfig) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	sw := &sweeper{m: m, cfg: cfg, pending: map[int64]time.Time{}, moved: map[int64]bool{}}
	var lease reservation.Lease
	defer func() {
		if lease != nil {
			lease.Release()
			m.metrics.sweeper.Set(0)
			m.metrics.pending.Set(0)
		}
	}()
	lastCheck := time.Time{}
	// A failed sweep is retried every Interval; while a store is down
	// each retry fails at once (ten a second), so the failures are logged
	// at most every 10s, with their count: the first of a run at once.
	var lastFailLog time.Time
	failed := 0
	for ctx.Err() == nil {
		if lease == nil {
			l, err := m.cfg.MySQL.TryLease(ctx, "handoffs")
			if err != nil && ctx.Err() == nil {
				m.log.Warn("mirror: take the handoff sweeper's lease", "err", err)
			}
			if l == nil {
				sleep(ctx, m.cfg.Standby, nil)
				continue
			}
			lease, lastCheck = l, time.Now()
			m.metrics.sweeper.Set(1)
			sw.lastScan = time.Time{} // a new leader looks at every shop
			m.log.Info("mirror: this replica is the pod's handoff sweeper")
		}
		if time.Since(lastCheck) >= m.cfg.Standby {
			lastCheck = time.Now()
			if !lease.Held(ctx) && ctx.Err() == nil {
				lease.Release()
				lease = nil
				m.metrics.sweeper.Set(0)
				m.metrics.pending.Set(0) // the active sweeper counts them now
				m.log.Warn("mirror: lost the handoff sweeper's lease; standing by")
				continue
			}
		}
		switch err := sw.step(ctx); {
		case err == nil:
			lastFailLog, failed = time.Time{}, 0
		case ctx.Err() == nil:
			failed++
			if time.Since(lastFailLog) >= 10*time.Second {
				m.log.Warn("mirror: handoff sweep failed; retrying (logged every 10s at most)", "err", err, "failures", failed)
				lastFailLog, failed = time.Now(), 0
			}
		}
		sleep(ctx, cfg.Interval, nil)
	}
	return ctx.Err()
}

// sweeper is the state of an active sweeper: what it owes the version in
// force. All of it is rebuilt by a sweep.
type sweeper struct {
	m   *Mirror
	cfg SweeperConfig

	version  int64
	lastScan time.Time
	// pending are the shops still to hand off, and since when.
	pending map[int64]time.Time
	// moved are the shops the version in force moved to another decider:
	// found pending, or found handed off at the version's epoch already
	// (a call on the shop beat the sweeper to it). The report's Shops.
	moved map[int64]bool
	// progress is the report of the version in force.
	progress Progress
}

// step moves MySQL's fence off the shops Redis took by force (fenceOff),
// then sweeps when the version changed or a rescan is due, and otherwise
// retries the pending shops.
func (sw *sweeper) step(ctx context.Context) error {
	if err := sw.m.fenceOff(ctx); err != nil {
		return err
	}
	v, ok := sw.cfg.Version(ctx)
	if !ok {
		return nil // no flags: nothing to hand off to
	}
	now := time.Now()
	switch {
	case v != sw.version:
		sw.version = v
		sw.pending, sw.moved = map[int64]time.Time{}, map[int64]bool{}
		sw.progress = Progress{FlagsVersion: v, Started: now}
		return sw.sweep(ctx)
	case time.Since(sw.lastScan) >= sw.cfg.Rescan:
		return sw.sweep(ctx)
	case len(sw.pending) > 0:
		return sw.retry(ctx)
	}
	return nil
}

// shopState is what a sweep reads of one shop.
type shopState struct {
	mysql   reservation.Fence
	copying int64
	redis   reservation.Fence
}

// sweep compares every shop's fences with the flags and hands off those
// that differ.
func (sw *sweeper) sweep(ctx context.Context) error {
	start := time.Now()
	// A sweep that fails halfway is done again at the next step, not at
	// the next Rescan: the shops it did not judge may be owed a handoff.
	sw.lastScan = time.Time{}
	states, err := sw.read(ctx)
	if err != nil {
		return err
	}
	for shop, st := range states {
		to, epoch, _, err := sw.cfg.Wanted(ctx, shop)
		if err != nil {
			return fmt.Errorf("mirror: sweep: flags of shop %d: %w", shop, err)
		}
		switch sw.judge(st, to, epoch) {
		case judgedPending:
			if _, ok := sw.pending[shop]; !ok {
				sw.pending[shop] = start
			}
			sw.moved[shop] = true
		case judgedAhead:
			delete(sw.pending, shop) // newer flags elsewhere: theirs to hand off
		case judgedDone:
			delete(sw.pending, shop)
			if max(st.mysql.Epoch, st.redis.Epoch) == epoch {
				sw.moved[shop] = true // handed off at this version, by a call
			}
		}
	}
	sw.progress.Shops = int64(len(sw.moved))
	sw.lastScan = start
	return sw.retry(ctx)
}

type judgement int

const (
	judgedDone judgement = iota
	judgedPending
	judgedAhead // a fence is newer than these flags: their replica is behind
)

// judge compares a shop's fences with what the flags want. Done: both
// stores' fences name the wanted store (MySQL's says it decides, Redis's
// that it yielded; or Redis's says it decides and MySQL's that it does
// not), and, where Redis is wanted, no copy into MySQL is under way: a
// copy the flags abandoned (they went back to Redis before its cut-over)
// is ended by handing the shop to Redis at the new epoch (MySQL's fence
// change clears the copy, and overtakes its cut-over), so that MySQL
// keeps shadow holds again. A fence newer than the flags is another
// replica's newer flags: left alone. A fence at the flags' own epoch that
// is not done is a handoff at this version that stopped halfway (one
// store yielded, the other's takeover failed: neither decides): pending,
// so the sweep finishes it rather than leave a quiet shop undecided.
func (sw *sweeper) judge(st shopState, to reservation.Authority, epoch int64) judgement {
	if st.mysql.Decider == to && st.redis.Decider == to && (to == reservation.AuthorityMySQL || st.copying == 0) {
		return judgedDone
	}
	if epoch == 0 || max(st.mysql.Epoch, st.redis.Epoch) > epoch {
		return judgedAhead
	}
	return judgedPending
}

// read lists every shop the pod's stores know (the ledger's, every fenced
// one, Redis's) with both fences.
func (sw *sweeper) read(ctx context.Context) (map[int64]shopState, error) {
	my, rd := sw.m.cfg.MySQL, sw.m.cfg.Redis
	ledger, err := my.Shops(ctx)
	if err != nil {
		return nil, fmt.Errorf("mirror: sweep: %w", err)
	}
	fences, err := my.Fences(ctx)
	if err != nil {
		return nil, fmt.Errorf("mirror: sweep: %w", err)
	}
	known, err := rd.Shops(ctx)
	if err != nil {
		return nil, fmt.Errorf("mirror: sweep: %w", err)
	}
	all := map[int64]bool{}
	for _, s := range ledger {
		all[s] = true
	}
	for s := range fences {
		all[s] = true
	}
	for _, s := range known {
		all[s] = true
	}
	shops := slices.Sorted(maps.Keys(all))
	rf, err := rd.Fences(ctx, shops)
	if err != nil {
		return nil, fmt.Errorf("mirror: sweep: %w", err)
	}
	out := make(map[int64]shopState, len(shops))
	for _, s := range shops {
		st := shopState{mysql: reservation.NoFence, redis: rf[s]}
		if f, ok := fences[s]; ok {
			st.mysql, st.copying = f.Fence, f.Copying
		}
		out[s] = st
	}
	return out, nil
}

// retry hands off the pending shops, Concurrency at a time, and writes
// the report as it goes.
func (sw *sweeper) retry(ctx context.Context) error {
	shops := slices.Sorted(maps.Keys(sw.pending))
	var mu sync.Mutex
	failed, lastErr := int64(0), ""
	work := make(chan int64)
	var wg sync.WaitGroup
	for range min(sw.cfg.Concurrency, len(shops)) {
		wg.Go(func() {
			for shop := range work {
				ok, err := sw.handOff(ctx, shop)
				mu.Lock()
				switch {
				case err != nil:
					failed++
					lastErr = err.Error()
				case ok:
					delete(sw.pending, shop)
				}
				mu.Unlock()
			}
		})
	}
	report := time.NewTicker(250 * time.Millisecond)
	defer report.Stop()
feed:
	for _, shop := range shops {
		for {
			select {
			case work <- shop:
				continue feed
			case <-ctx.Done():
				break feed
			case <-report.C:
				mu.Lock()
				sw.save(ctx, failed, lastErr)
				mu.Unlock()
			}
		}
	}
	close(work)
	wg.Wait()
	sw.save(ctx, failed, lastErr)
	return ctx.Err()
}

// handOff hands one shop off to what the flags want now, and reports
// whether it is done (both fences agree with the flags).
func (sw *sweeper) handOff(ctx context.Context, shop int64) (bool, error) {
	to, epoch, force, err := sw.cfg.Wanted(ctx, shop)
	if err != nil {
		return false, err
	}
	if epoch == 0 {
		return false, nil
	}
	f, err := sw.m.HandoffWait(ctx, shop, to, epoch, force)
	if err != nil {
		return false, err
	}
	if f.Decider != to {
		return f.Epoch >= epoch, nil // busy elsewhere (retried), or newer flags elsewhere (left alone)
	}
	sw.m.metrics.swept.Inc()
	return true, nil
}

// save writes the report (pending, and since when the oldest waits).
func (sw *sweeper) save(ctx context.Context, failed int64, lastErr string) {
	p := &sw.progress
	p.Pending, p.Failed, p.LastError = int64(len(sw.pending)), failed, lastErr
	p.Done = max(p.Shops-p.Pending, 0)
	p.OldestPending = time.Time{}
	for _, since := range sw.pending {
		if p.OldestPending.IsZero() || since.Before(p.OldestPending) {
			p.OldestPending = since
		}
	}
	if p.Pending == 0 && p.Finished.IsZero() {
		p.Finished = time.Now()
		if p.Shops > 0 {
			sw.m.log.Info("mirror: handed every shop off", "flags_version", p.FlagsVersion, "shops", p.Shops, "took", p.Finished.Sub(p.Started).Round(time.Millisecond))
		}
	}
	if p.Pending > 0 {
		p.Finished = time.Time{}
	}
	p.Updated, p.Replica = time.Now(), sw.cfg.Replica
	sw.m.metrics.pending.Set(float64(p.Pending))
	if err := sw.m.cfg.MySQL.SaveHandoffProgress(ctx, *p); err != nil && ctx.Err() == nil {
		sw.m.log.Warn("mirror: write the handoff progress", "err", err)
	}
}

// Progress reads the pod's handoff report, written by whichever replica
// sweeps; ok is false before any sweep.
func (m *Mirror) Progress(ctx context.Context) (Progress, bool, error) {
	return m.cfg.MySQL.LoadHandoffProgress(ctx)
}
