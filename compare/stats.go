package compare

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/seed31b0e981/reservoir/internal/controldb"
)

// Side is one of the two roles in a dual-written call.
type Side string

// The sides.
const (
	SideAuthority Side = "authority"
	SideShadow    Side = "shadow"
)

// statKey is one compare_stats row.
type statKey struct {
	pod    string
	window int64 // unix seconds of the window's start
	mode   string
	op     string
	class  string
}

func (a statKey) compare(b statKey) int {
	return cmp.Or(cmp.Compare(a.pod, b.pod), cmp.Compare(a.window, b.window), cmp.Compare(a.mode, b.mode),
		cmp.Compare(a.op, b.op), cmp.Compare(a.class, b.class))
}

// statVal is the increments pending for one row.
type statVal struct {
	n                 int64
	authority, shadow latencyAcc
}

type latencyAcc struct{ n, sumUs, maxUs int64 }

func (l *latencyAcc) add(d time.Duration) {
	us := d.Microseconds()
	l.n++
	l.sumUs += us
	l.maxUs = max(l.maxUs, us)
}

// count adds an observation to the pending stats.
func (c *Comparer) count(o Observation, class Class, at time.Time) {
	k := statKey{
		pod:    clip(o.Pod, maxPod),
		window: at.UTC().Truncate(c.cfg.Window).Unix(),
		mode:   clip(o.Mode, maxMode),
		op:     clip(string(o.Op), maxOp),
		class:  string(class),
	}
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	v := c.pending[k]
	if v == nil {
		if len(c.pending)+len(c.served)+c.unackedRows >= c.cfg.MaxPendingStats {
			c.m.statsDropped.Inc()
			return
		}
		v = &statVal{}
		c.pending[k] = v
	}
	v.n++
	if o.Relayed {
		return // no latency measured
	}
	v.authority.add(o.Authority.Latency)
	if !o.Shadow.Skipped {
		v.shadow.add(o.Shadow.Latency)
	}
}

// statBatch is one flush's increments, with the id that makes writing them
// idempotent.
type statBatch struct {
	id   []byte
	keys []statKey // sorted in primary-key order
	vals map[statKey]*statVal
	// traffic are the Served counts, keys sorted in primary-key order.
	traffic     []trafficKey
	trafficVals map[trafficKey]int64
}

// rows is the batch's rows, counted against MaxPendingStats.
func (b statBatch) rows() int { return len(b.keys) + len(b.traffic) }

// flushStats turns the pending increments into a batch and writes every
// batch not yet acknowledged, oldest first.
//
// Each batch is written exactly once: its transaction first inserts the
// batch's id into compare_flushes, so a retry of a batch the server did
// apply (the client gave up while the COMMIT went through) fails on the
// duplicate id and is acknowledged instead of counted twice. A batch that
// failed is retried unchanged at the next flush; new observations go into
// the next batch.
func (c *Comparer) flushStats(ctx context.Context) error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	c.statsMu.Lock()
	if len(c.pending) > 0 || len(c.served) > 0 {
		p, t := c.pending, c.served
		c.pending = make(map[statKey]*statVal, len(p))
		c.served = make(map[trafficKey]int64, len(t))
		id := make([]byte, 16)
		_, _ = rand.Read(id)
		b := statBatch{id: id, keys: slices.SortedFunc(maps.Keys(p), statKey.compare), vals: p,
			traffic: slices.SortedFunc(maps.Keys(t), trafficKey.compare), trafficVals: t}
		c.unacked = append(c.unacked, b)
		c.unackedRows += b.rows()
	}
	batches := slices.Clone(c.unacked)
	c.statsMu.Unlock()
	if len(batches) == 0 {
		return nil
	}
	for i, b := range batches {
		if err := c.writeBatchTx(ctx, b); err != nil {
			c.ack(i)
			c.m.statsFlushes.WithLabelValues("error").Inc()
			c.logf(slog.LevelWarn, "compare: flush stats failed; kept for the next flush", "batches", len(batches)-i, "err", err)
			return fmt.Errorf("compare: flush stats: %w", err)
		}
	}
	c.ack(len(batches))
	c.m.statsFlushes.WithLabelValues("ok").Inc()
	return nil
}

// ack forgets the n oldest batches: they are written.
func (c *Comparer) ack(n int) {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	for _, b := range c.unacked[:n] {
		c.unackedRows -= b.rows()
	}
	c.unacked = slices.Delete(c.unacked, 0, n)
}

func (c *Comparer) writeBatchTx(ctx context.Context, b statBatch) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.WriteTimeout)
	defer cancel()
	// READ COMMITTED, as in mysqlstore: no gap locks between replicas
	// inserting neighbouring new keys.
	tx, err := c.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := controldb.InsertFlush(ctx, tx, b.id); err != nil {
		if controldb.IsDuplicate(err) {
			return nil // written before: the client missed the COMMIT's answer
		}
		return err
	}
	stats := make([]controldb.StatsRow, 0, len(b.keys))
	for _, k := range b.keys {
		v := b.vals[k]
		stats = append(stats, controldb.StatsRow{Pod: k.pod, WindowStart: time.Unix(k.window, 0).UTC(), Mode: k.mode, Op: k.op, Class: k.class, N: v.n,
			AuthorityN: v.authority.n, AuthorityUsSum: v.authority.sumUs, AuthorityUsMax: v.authority.maxUs,
			ShadowN: v.shadow.n, ShadowUsSum: v.shadow.sumUs, ShadowUsMax: v.shadow.maxUs})
	}
	if err := controldb.UpsertStats(ctx, tx, stats); err != nil {
		return err
	}
	traffic := make([]controldb.TrafficRow, 0, len(b.traffic))
	for _, k := range b.traffic {
		traffic = append(traffic, controldb.TrafficRow{Pod: k.pod, WindowStart: time.Unix(k.window, 0).UTC(), Mode: k.mode, Op: k.op, N: b.trafficVals[k]})
	}
	if err := controldb.UpsertTraffic(ctx, tx, traffic); err != nil {
		return err
	}
	return tx.Commit()
}

// Totals is what compare_stats says about one pod (or every pod) since a
// time, summed over every replica that flushed.
type Totals struct {
	// Pod is the pod asked for ("" for every pod).
	Pod string
	// Since is where the count starts: Totals' since truncated to the
	// window, TotalsFrom's from.
	Since time.Time
	// First is the start of the earliest window that held an observation
	// counted; zero when none did.
	First time.Time
	// Observations counts every observation, all modes together.
	Observations int64
	// ByMode holds one Summary per mode seen. Calibration modes (see
	// IsCalibration) are here under their own names, never mixed in.
	ByMode map[string]Summary
}

// Summary is the counts, rates and latencies of a set of observations.
type Summary struct {
	// Observations is how many there were.
	Observations int64
	// ByClass counts them per class.
	ByClass map[Class]int64
	// ByOp counts them per operation and class.
	ByOp map[Op]map[Class]int64
	// Rates is ByClass divided by Observations.
	Rates map[Class]float64
	// MismatchRate is the rate of the classes that are disagreements about
	// state (Class.Mismatch: outcome, allocation, shadow missing), without
	// stock-out races.
	MismatchRate float64
	// ShadowErrorRate is the rate of shadow faults (Class.ShadowFault:
	// error, panic, timeout) over all observations. Skips are not faults:
	// see Rates[ClassShadowSkipped].
	ShadowErrorRate float64
	// Latency is each side's latency over every operation. The shadow's
	// counts only the calls it ran (not skipped); a timed-out call counts
	// with the time it ran.
	Latency map[Side]Latency
	// OpLatency is each side's latency per operation.
	OpLatency map[Op]map[Side]Latency
	// LatencyRatio is the shadow's mean latency over the authority's (0
	// when either is unknown): above 1 the shadow is slower.
	LatencyRatio float64
}

// Latency sums one side's latencies.
type Latency struct {
	// Count is how many calls were timed.
	Count int64
	// Total is their sum, Max the longest, Mean Total/Count (microsecond
	// precision).
	Total time.Duration
	Max   time.Duration
	Mean  time.Duration
}

func (l Latency) merge(o Latency) Latency {
	l.Count += o.Count
	l.Total += o.Total
	l.Max = max(l.Max, o.Max)
	if l.Count > 0 {
		l.Mean = l.Total / time.Duration(l.Count)
	}
	return l
}

// Mode returns the summary of one mode (empty when none was seen).
func (t Totals) Mode(mode string) Summary { return t.ByMode[mode] }

// Live merges every mode that is not a calibration mode: what the two
// stores did with real traffic.
func (t Totals) Live() Summary {
	return t.merged(func(m string) bool { return !IsCalibration(m) })
}

// Calibration merges every calibration mode: the noise floor.
func (t Totals) Calibration() Summary { return t.merged(IsCalibration) }

func (t Totals) merged(keep func(string) bool) Summary {
	var s Summary
	for _, m := range slices.Sorted(maps.Keys(t.ByMode)) {
		if keep(m) {
			s = s.merge(t.ByMode[m])
		}
	}
	return s
}

// Rate returns the fraction of observations of class c (0 with none).
func (s Summary) Rate(c Class) float64 { return s.Rates[c] }

// Excess is the rate of class c above the noise floor measured in noise
// (typically Totals.Calibration()), never below 0: Diffy's subtraction. A
// gate on "outcome mismatches that are not noise" reads
// live.Excess(ClassOutcomeMismatch, totals.Calibration()).
func (s Summary) Excess(c Class, noise Summary) float64 {
	return max(0, s.Rate(c)-noise.Rate(c))
}

func (s Summary) merge(o Summary) Summary {
	s.Observations += o.Observations
	for cl, n := range o.ByClass {
		s.ByClass = addCount(s.ByClass, cl, n)
	}
	for op, byClass := range o.ByOp {
		for cl, n := range byClass {
			s.addOp(op, cl, n)
		}
	}
	for side, l := range o.Latency {
		s.Latency = setLatency(s.Latency, side, s.Latency[side].merge(l))
	}
	for op, bySide := range o.OpLatency {
		for side, l := range bySide {
			s.addOpLatency(op, side, l)
		}
	}
	return s.finish()
}

func (s *Summary) addOp(op Op, cl Class, n int64) {
	if s.ByOp == nil {
		s.ByOp = map[Op]map[Class]int64{}
	}
	s.ByOp[op] = addCount(s.ByOp[op], cl, n)
}

func (s *Summary) addOpLatency(op Op, side Side, l Latency) {
	if s.OpLatency == nil {
		s.OpLatency = map[Op]map[Side]Latency{}
	}
	s.OpLatency[op] = setLatency(s.OpLatency[op], side, s.OpLatency[op][side].merge(l))
}

func addCount[K comparable](m map[K]int64, k K, n int64) map[K]int64 {
	if m == nil {
		m = map[K]int64{}
	}
	m[k] += n
	return m
}

func setLatency(m map[Side]Latency, side Side, l Latency) map[Side]Latency {
	if m == nil {
		m = map[Side]Latency{}
	}
	m[side] = l
	return m
}

// finish computes the derived fields from the counts.
func (s Summary) finish() Summary {
	s.Rates = make(map[Class]float64, len(s.ByClass))
	s.MismatchRate, s.ShadowErrorRate, s.LatencyRatio = 0, 0, 0
	if s.Observations > 0 {
		for cl, n := range s.ByClass {
			r := float64(n) / float64(s.Observations)
			s.Rates[cl] = r
			if cl.Mismatch() {
				s.MismatchRate += r
			}
			if cl.ShadowFault() {
				s.ShadowErrorRate += r
			}
		}
	}
	if a, sh := s.Latency[SideAuthority], s.Latency[SideShadow]; a.Mean > 0 && sh.Count > 0 {
		s.LatencyRatio = float64(sh.Mean) / float64(a.Mean)
	}
	return s
}

// Window is the width of the windows Totals counts in (Config.Window).
func (c *Comparer) Window() time.Duration { return c.cfg.Window }

// Totals sums compare_stats for pod (every pod when pod is "") over the
// windows that start at or after since truncated to Config.Window: the
// window holding since counts whole. It reads what every replica has
// flushed; this replica's last FlushInterval is included only after Flush.
func (c *Comparer) Totals(ctx context.Context, pod string, since time.Time) (Totals, error) {
	return c.totals(ctx, pod, since.UTC().Truncate(c.cfg.Window))
}

// TotalsFrom sums compare_stats for pod (every pod when pod is "") over the
// windows that start at or after from: a window that began before from is
// left out whole, whatever width of window the replicas that wrote it
// count in. The rollout's gates count a stage's evidence so: no call
// observed before the stage was applied counts for it. First says where
// the count really starts.
func (c *Comparer) TotalsFrom(ctx context.Context, pod string, from time.Time) (Totals, error) {
	return c.totals(ctx, pod, from.UTC())
}

func (c *Comparer) totals(ctx context.Context, pod string, start time.Time) (Totals, error) {
	sums, err := controldb.SumStats(ctx, c.db, pod, start)
	if err != nil {
		return Totals{}, fmt.Errorf("compare: totals: %w", err)
	}
	byMode := map[string]Summary{}
	t := Totals{Pod: pod, Since: start, ByMode: map[string]Summary{}}
	for _, r := range sums {
		mode, op, cl, n := r.Mode, Op(r.Op), Class(r.Class), r.N
		s := byMode[mode]
		s.Observations += n
		s.ByClass = addCount(s.ByClass, cl, n)
		s.addOp(op, cl, n)
		for side, l := range map[Side]Latency{
			SideAuthority: {Count: r.AuthorityN, Total: time.Duration(r.AuthorityUsSum) * time.Microsecond, Max: time.Duration(r.AuthorityUsMax) * time.Microsecond},
			SideShadow:    {Count: r.ShadowN, Total: time.Duration(r.ShadowUsSum) * time.Microsecond, Max: time.Duration(r.ShadowUsMax) * time.Microsecond},
		} {
			if l.Count == 0 {
				continue
			}
			s.Latency = setLatency(s.Latency, side, s.Latency[side].merge(l))
			s.addOpLatency(op, side, l)
		}
		byMode[mode] = s
		t.Observations += n
		if t.First.IsZero() || r.First.Before(t.First) {
			t.First = r.First
		}
	}
	for m, s := range byMode {
		t.ByMode[m] = s.finish()
	}
	return t, nil
}
