package compare

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Comparer classifies observations, counts them, persists sampled diff
// records and per-window stats. It is safe for concurrent use. It owns two
// goroutines (the diff writer and the stats flusher), started by New and
// stopped by Close.
type Comparer struct {
	cfg Config
	db  *sql.DB
	m   *metrics
	log *slog.Logger

	diffBuckets map[Class]*bucket
	logBucket   *bucket
	diffs       chan diffItem

	statsMu     sync.Mutex
	pending     map[statKey]*statVal // increments since the last flush
	served      map[trafficKey]int64 // Served's increments since the last flush
	unacked     []statBatch          // flushed batches not yet known to be written, oldest first
	unackedRows int                  // keys in unacked, counted against MaxPendingStats
	flushMu     sync.Mutex           // one stats flush at a time

	closed     atomic.Bool
	stop       chan struct{} // closed by Close: finish up and exit
	stopOnce   sync.Once
	ctx        context.Context // background statements; cancelled when Close gives up waiting
	cancel     context.CancelFunc
	writerDone chan struct{}
	wg         sync.WaitGroup
}

// New returns a Comparer and starts its background writer and flusher.
// It does not touch cfg.DB.
func New(cfg Config) (*Comparer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("compare: register metrics: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Comparer{
		cfg:         cfg,
		db:          cfg.DB,
		m:           m,
		log:         cfg.Logger,
		diffBuckets: make(map[Class]*bucket, len(Classes)),
		logBucket:   newBucket(cfg.LogRate, cfg.LogBurst),
		diffs:       make(chan diffItem, cfg.DiffQueue),
		pending:     make(map[statKey]*statVal),
		served:      make(map[trafficKey]int64),
		stop:        make(chan struct{}),
		ctx:         ctx,
		cancel:      cancel,
		writerDone:  make(chan struct{}),
	}
	for _, cl := range Classes {
		if cl != ClassMatch {
			c.diffBuckets[cl] = newBucket(cfg.DiffRate, cfg.DiffBurst)
		}
	}
	c.wg.Add(2)
	go c.writeDiffs()
	go c.flushLoop()
	return c, nil
}

// Observe classifies o, counts it, and queues a diff record of it when it is
// not a match (rate permitting). It never waits on the database: its cost is
// Classify, a few counter updates under short locks, and a non-blocking
// channel send. After Close it still classifies and counts in Prometheus,
// but keeps no stats and no diff record. (It returns nothing so that it
// fits dualwrite.Observer; Classify gives the class.)
func (c *Comparer) Observe(o Observation) {
	class := Classify(o, c.cfg.Rules)
	at := o.At
	if at.IsZero() {
		at = time.Now()
	}
	op, mode := string(o.Op), o.Mode
	c.m.observations.WithLabelValues(op, string(class), o.Pod, mode).Inc()
	if !o.Relayed {
		c.m.latency.WithLabelValues(string(o.Authority.Store), string(SideAuthority), op, mode).Observe(o.Authority.Latency.Seconds())
		if !o.Shadow.Skipped {
			c.m.latency.WithLabelValues(string(o.Shadow.Store), string(SideShadow), op, mode).Observe(o.Shadow.Latency.Seconds())
		}
	}
	if c.closed.Load() {
		c.m.statsDropped.Inc()
		if class != ClassMatch {
			c.m.diffsDropped.WithLabelValues(dropClosed).Inc()
		}
		return
	}
	c.count(o, class, at)
	if class != ClassMatch {
		c.sample(o, class, at)
		c.logObservation(o, class)
	}
}

// Flush writes the stats accumulated so far to compare_stats and waits until
// the diff records queued before the call are written (or dropped). Totals
// then includes this replica's observations up to now.
func (c *Comparer) Flush(ctx context.Context) error {
	err := c.flushStats(ctx)
	done := make(chan struct{})
	select {
	case c.diffs <- diffItem{done: done}:
	case <-c.writerDone:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
	case <-c.writerDone:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// Close stops the background goroutines after they write what is pending:
// queued diff records and a last stats flush. It waits until ctx is done at
// most; then it cancels their statements, waits for them to return, and
// returns ctx's error. Close is idempotent; Observe after Close keeps
// counting in Prometheus only.
func (c *Comparer) Close(ctx context.Context) error {
	c.stopOnce.Do(func() {
		c.closed.Store(true)
		close(c.stop)
	})
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
		c.cancel()
		return nil
	case <-ctx.Done():
		c.cancel() // every background statement runs under c.ctx: they return now
		<-done
		return fmt.Errorf("compare: close: %w", ctx.Err())
	}
}

// flushLoop flushes the stats every FlushInterval and cleans up past
// retention every CleanupInterval, until Close.
func (c *Comparer) flushLoop() {
	defer c.wg.Done()
	flush := time.NewTicker(c.cfg.FlushInterval)
	defer flush.Stop()
	var cleanup <-chan time.Time
	if c.cfg.CleanupInterval > 0 {
		t := time.NewTicker(c.cfg.CleanupInterval)
		defer t.Stop()
		cleanup = t.C
	}
	for {
		select {
		case <-flush.C:
			ctx, cancel := context.WithTimeout(c.ctx, c.cfg.WriteTimeout)
			_ = c.flushStats(ctx) // counted and logged; the counts wait for the next flush
			cancel()
		case <-cleanup:
			if _, err := c.Cleanup(c.ctx); err != nil {
				c.logf(slog.LevelWarn, "compare: retention cleanup failed", "err", err)
			}
		case <-c.stop:
			ctx, cancel := context.WithTimeout(c.ctx, c.cfg.WriteTimeout)
			_ = c.flushStats(ctx)
			cancel()
			return
		}
	}
}

// logObservation logs a non-match observation, within the log rate cap.
func (c *Comparer) logObservation(o Observation, class Class) {
	level := slog.LevelWarn
	if class == ClassStockoutRace || class == ClassShadowSkipped || class == ClassShadowLate {
		level = slog.LevelInfo
	}
	if !c.log.Enabled(context.Background(), level) {
		return
	}
	if !c.logBucket.allow(time.Now()) {
		c.m.logsDropped.Inc()
		return
	}
	c.log.LogAttrs(context.Background(), level, "compare: "+string(class),
		slog.String("class", string(class)),
		slog.String("op", string(o.Op)),
		slog.String("pod", o.Pod),
		slog.String("mode", o.Mode),
		slog.Int64("shop", o.Shop),
		slog.String("token", o.Token),
		outcomeAttr("authority", o.Authority),
		outcomeAttr("shadow", o.Shadow),
	)
}

func outcomeAttr(key string, o Outcome) slog.Attr {
	attrs := []slog.Attr{
		slog.String("store", string(o.Store)),
		slog.String("result", o.Result),
		slog.Duration("latency", o.Latency),
	}
	if o.Err != nil {
		attrs = append(attrs, slog.String("err", clip(o.Err.Error(), maxErrorText)))
	}
	if len(o.Allocations) > 0 {
		attrs = append(attrs, slog.Any("allocations", o.Allocations))
	}
	if len(o.Short) > 0 {
		attrs = append(attrs, slog.Any("short", o.Short))
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"skipped", o.Skipped}, {"timed_out", o.TimedOut}, {"panicked", o.Panicked}} {
		if f.set {
			attrs = append(attrs, slog.Bool(f.name, true))
		}
	}
	return slog.Attr{Key: key, Value: slog.GroupValue(attrs...)}
}

// logf logs the comparer's own trouble, within the log rate cap.
func (c *Comparer) logf(level slog.Level, msg string, args ...any) {
	if !c.logBucket.allow(time.Now()) {
		c.m.logsDropped.Inc()
		return
	}
	c.log.Log(context.Background(), level, msg, args...)
}

// clip cuts s to at most n bytes (on a byte boundary: the columns are
// binary and the text is for people).
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
