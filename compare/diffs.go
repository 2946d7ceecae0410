package compare

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/seed31b0e981/reservoir/internal/controldb"
	"github.com/seed31b0e981/reservoir/reservation"
)

// DiffRecord is a sampled non-match observation, as kept in compare_diffs:
// both sides in full.
type DiffRecord struct {
	// ID is the row id (0 before it is written).
	ID int64 `json:"id"`
	// Pod, Mode, Op and Class are the observation's labels and its class.
	Pod   string `json:"pod"`
	Mode  string `json:"mode"`
	Op    Op     `json:"op"`
	Class Class  `json:"class"`
	// Shop and Token identify the reservation.
	Shop  int64  `json:"shop"`
	Token string `json:"token"`
	// At is when the call started (millisecond precision once stored).
	At time.Time `json:"at"`
	// Authority and Shadow are what each store did.
	Authority OutcomeRecord `json:"authority"`
	Shadow    OutcomeRecord `json:"shadow"`
}

// OutcomeRecord is an Outcome as stored: the error kept as its text (at most
// 1024 bytes).
type OutcomeRecord struct {
	Store       reservation.Authority    `json:"store"`
	Result      string                   `json:"result,omitempty"`
	Allocations []reservation.Allocation `json:"allocations,omitempty"`
	Short       []reservation.ShortLine  `json:"short,omitempty"`
	Error       string                   `json:"error,omitempty"`
	Latency     time.Duration            `json:"latency_ns"`
	Skipped     bool                     `json:"skipped,omitempty"`
	TimedOut    bool                     `json:"timed_out,omitempty"`
	Panicked    bool                     `json:"panicked,omitempty"`
}

// Column widths of compare_diffs and compare_stats: longer values are cut,
// never rejected.
const (
	maxPod       = 64
	maxMode      = 32
	maxOp        = 16
	maxClass     = 32
	maxToken     = 64
	maxStore     = 8
	maxErrorText = 1024
)

func recordOf(o Outcome) OutcomeRecord {
	r := OutcomeRecord{
		Store:       o.Store,
		Result:      o.Result,
		Allocations: slices.Clone(o.Allocations),
		Short:       slices.Clone(o.Short),
		Latency:     o.Latency,
		Skipped:     o.Skipped,
		TimedOut:    o.TimedOut,
		Panicked:    o.Panicked,
	}
	if o.Err != nil {
		r.Error = clip(o.Err.Error(), maxErrorText)
	}
	return r
}

// diffItem is what the queue carries: a record to write, or (done set) a
// marker that Flush waits on.
type diffItem struct {
	rec  *DiffRecord
	done chan struct{}
}

// sample queues a diff record of a non-match observation if its class's
// bucket has a token and the queue has room; otherwise it counts the drop.
func (c *Comparer) sample(o Observation, class Class, at time.Time) {
	b := c.diffBuckets[class]
	if b == nil || !b.allow(time.Now()) {
		c.m.diffsDropped.WithLabelValues(dropRateLimited).Inc()
		return
	}
	rec := &DiffRecord{
		Pod: o.Pod, Mode: o.Mode, Op: o.Op, Class: class,
		Shop: o.Shop, Token: o.Token, At: at.UTC(),
		Authority: recordOf(o.Authority),
		Shadow:    recordOf(o.Shadow),
	}
	select {
	case c.diffs <- diffItem{rec: rec}:
	default:
		c.m.diffsDropped.WithLabelValues(dropQueueFull).Inc()
	}
}

// writeDiffs is the one goroutine that writes diff records, in batches of
// up to DiffBatch, until Close; then it writes what is queued and exits.
func (c *Comparer) writeDiffs() {
	defer c.wg.Done()
	defer close(c.writerDone)
	batch := make([]*DiffRecord, 0, c.cfg.DiffBatch)
	// take adds an item to the batch; a marker first writes the batch.
	take := func(it diffItem) {
		if it.done != nil {
			c.writeBatch(batch)
			batch = batch[:0]
			close(it.done)
			return
		}
		batch = append(batch, it.rec)
		if len(batch) == cap(batch) {
			c.writeBatch(batch)
			batch = batch[:0]
		}
	}
	for {
		select {
		case it := <-c.diffs:
			take(it)
		drain:
			for len(batch) > 0 {
				select {
				case it := <-c.diffs:
					take(it)
				default:
					break drain
				}
			}
			c.writeBatch(batch)
			batch = batch[:0]
		case <-c.stop:
			for {
				select {
				case it := <-c.diffs:
					take(it)
				default:
					c.writeBatch(batch)
					return
				}
			}
		}
	}
}

func (c *Comparer) writeBatch(batch []*DiffRecord) {
	if len(batch) == 0 {
		return
	}
	rows := make([]controldb.DiffRow, 0, len(batch))
	for _, r := range batch {
		a, err := json.Marshal(r.Authority)
		if err != nil {
			panic(err) // plain data: cannot fail
		}
		s, err := json.Marshal(r.Shadow)
		if err != nil {
			panic(err)
		}
		rows = append(rows, controldb.DiffRow{Pod: clip(r.Pod, maxPod), ObservedAt: r.At, Mode: clip(r.Mode, maxMode), Op: clip(string(r.Op), maxOp),
			Class: clip(string(r.Class), maxClass), ShopID: r.Shop, Token: clip(r.Token, maxToken),
			AuthorityStore: clip(string(r.Authority.Store), maxStore), ShadowStore: clip(string(r.Shadow.Store), maxStore),
			Authority: string(a), Shadow: string(s)})
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.WriteTimeout)
	defer cancel()
	if err := controldb.InsertDiffs(ctx, c.db, rows); err != nil {
		c.m.diffsDropped.WithLabelValues(dropWriteFailed).Add(float64(len(batch)))
		c.logf(slog.LevelWarn, "compare: write diff records failed", "records", len(batch), "err", err)
		return
	}
	c.m.diffsWritten.Add(float64(len(batch)))
}

// RecentDiffs returns the newest diff records of a pod (every pod when pod
// is ""), newest first. limit <= 0 means 50; it is capped at 1000.
func (c *Comparer) RecentDiffs(ctx context.Context, pod string, limit int) ([]DiffRecord, error) {
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 1000)
	rows, err := controldb.RecentDiffs(ctx, c.db, pod, limit)
	if err != nil {
		return nil, fmt.Errorf("compare: recent diffs: %w", err)
	}
	var out []DiffRecord
	for _, row := range rows {
		r := DiffRecord{ID: row.ID, Pod: row.Pod, At: row.ObservedAt.UTC(), Mode: row.Mode, Op: Op(row.Op), Class: Class(row.Class),
			Shop: row.ShopID, Token: row.Token}
		if err := json.Unmarshal([]byte(row.Authority), &r.Authority); err != nil {
			return nil, fmt.Errorf("compare: diff record %d: authority: %w", r.ID, err)
		}
		if err := json.Unmarshal([]byte(row.Shadow), &r.Shadow); err != nil {
			return nil, fmt.Errorf("compare: diff record %d: shadow: %w", r.ID, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Cleaned is what one Cleanup deleted.
type Cleaned struct {
	// Diffs is the number of diff records deleted (older than Retention).
	Diffs int64
	// Stats is the number of stats rows deleted (windows that started
	// before StatsRetention).
	Stats int64
	// Traffic is the number of traffic rows deleted (windows that
	// started before StatsRetention).
	Traffic int64
}

// Cleanup deletes diff records older than Config.Retention and stats and
// traffic windows (and the flush ids that guard them) older than
// Config.StatsRetention, CleanupBatch rows per statement
// until none is left. The comparer runs it every CleanupInterval; several
// replicas may run it at once.
func (c *Comparer) Cleanup(ctx context.Context) (Cleaned, error) {
	now := time.Now().UTC()
	var res Cleaned
	var err error
	res.Diffs, err = c.deleteBatches(ctx, "compare_diffs", controldb.DeleteDiffsBefore, now.Add(-c.cfg.Retention))
	if err != nil {
		return res, err
	}
	res.Stats, err = c.deleteBatches(ctx, "compare_stats", controldb.DeleteStatsBefore, now.Add(-c.cfg.StatsRetention))
	if err != nil {
		return res, err
	}
	res.Traffic, err = c.deleteBatches(ctx, "compare_traffic", controldb.DeleteTrafficBefore, now.Add(-c.cfg.StatsRetention))
	if err != nil {
		return res, err
	}
	_, err = c.deleteBatches(ctx, "compare_flushes", controldb.DeleteFlushesBefore, now.Add(-c.cfg.StatsRetention))
	return res, err
}

// deleteBatches runs del (one of controldb's Delete*Before) until it
// deletes fewer than CleanupBatch rows, each statement under its own
// WriteTimeout, counting the rows of table it deleted.
func (c *Comparer) deleteBatches(ctx context.Context, table string,
	del func(context.Context, controldb.Querier, time.Time, int) (int64, error), before time.Time) (int64, error) {
	var total int64
	for {
		sctx, cancel := context.WithTimeout(ctx, c.cfg.WriteTimeout)
		n, err := del(sctx, c.db, before, c.cfg.CleanupBatch)
		cancel()
		if err != nil {
			return total, fmt.Errorf("compare: cleanup %s: %w", table, err)
		}
		total += n
		c.m.cleanedRows.WithLabelValues(table).Add(float64(n))
		if n < int64(c.cfg.CleanupBatch) {
			return total, nil
		}
	}
}
