package rollout

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/seed31b0e981/reservoir/internal/controldb"
	"github.com/seed31b0e981/reservoir/rollout/flagsource"
)

// A replica's heartbeat in the control database (rollout_replicas,
// through internal/controldb): who it is, which pods it serves, which
// version of the flags its flag source answers with and since when, and
// when it last reported. The controller reads them to tell when a change
// is obeyed by the whole fleet.

// HeartbeatInterval is how often a replica reports when nothing changes;
// a replica not heard from for LiveWithin is not counted as live.
const (
	HeartbeatInterval = time.Second
	LiveWithin        = 5 * time.Second
)

// Replica is one replica's last heartbeat.
type Replica struct {
	// ID is the replica's id: host, pid and start time.
	ID string
	// Pods are the pods it serves.
	Pods []string
	// AppliedVersion is the flags version its flag source answers with (0:
	// none loaded).
	AppliedVersion int64
	// AppliedAt is when it applied that version (the database's clock).
	AppliedAt time.Time
	// SeenAgo is how long ago it last reported.
	SeenAgo time.Duration
}

// Replicas lists the live replicas: those heard from within LiveWithin.
func Replicas(ctx context.Context, db *sql.DB) ([]Replica, error) {
	rows, err := controldb.LiveReplicas(ctx, db, LiveWithin)
	if err != nil {
		return nil, fmt.Errorf("rollout: list replicas: %w", err)
	}
	var out []Replica
	for _, row := range rows {
		r := Replica{ID: row.ID, AppliedVersion: row.AppliedVersion, AppliedAt: row.AppliedAt, SeenAgo: row.SeenAgo}
		if row.Pods != "" {
			r.Pods = strings.Split(row.Pods, ",")
		}
		out = append(out, r)
	}
	return out, nil
}

// Obedience says how the fleet obeyed a change of the flags.
type Obedience struct {
	// Version is the flags version written.
	Version int64
	// Live and Obeyed count the live replicas, and those that applied
	// Version (or a later one).
	Live   int
	Obeyed int
	// Took is how long after the write the last live replica applied it
	// (or how long the wait lasted, when some lag).
	Took time.Duration
	// Since is when the wait began, right after the write (and its
	// audit): what Took counts from.
	Since time.Time
	// Lagging are the live replicas that had not applied it by then.
	Lagging []Replica
	// Summary is String's line.
	Summary string
}

// String is the line the CLI prints: "obeyed by 12/12 replicas in 38 ms",
// or the replicas that lag.
func (o Obedience) String() string {
	if o.Live == 0 {
		return fmt.Sprintf("flags version %d written; no live replica reports to the control database (each `reservoir serve` does, every %s)", o.Version, HeartbeatInterval)
	}
	ms := float64(o.Took.Microseconds()) / 1000
	if o.Obeyed == o.Live {
		return fmt.Sprintf("obeyed by %d/%d replicas in %.0f ms (flags version %d)", o.Obeyed, o.Live, ms, o.Version)
	}
	lag := make([]string, len(o.Lagging))
	for i, r := range o.Lagging {
		lag[i] = fmt.Sprintf("%s (version %d)", r.ID, r.AppliedVersion)
	}
	return fmt.Sprintf("obeyed by %d/%d replicas within %.0f ms (flags version %d); lagging: %s", o.Obeyed, o.Live, ms, o.Version, strings.Join(lag, ", "))
}

// WaitObeyed waits, up to within, until every live replica reports version
// (or later) applied, polling the heartbeats every few milliseconds, and
// says how it went. Replicas that start meanwhile count once they report.
func WaitObeyed(ctx context.Context, db *sql.DB, version int64, within time.Duration) (Obedience, error) {
	return waitObeyed(ctx, db, version, within, 0)
}

// waitObeyed is WaitObeyed comparing only the bits of each replica's
// version under mask (0: all): the kill switch document's version in the
// epochs replicas report beside a source reservoir does not write.
func waitObeyed(ctx context.Context, db *sql.DB, version int64, within time.Duration, mask int64) (Obedience, error) {
	start := time.Now()
	deadline := start.Add(within)
	for {
		rs, err := Replicas(ctx, db)
		if err != nil {
			return Obedience{}, err
		}
		ob := Obedience{Version: version, Live: len(rs), Took: time.Since(start), Since: start}
		for _, r := range rs {
			if mask != 0 {
				r.AppliedVersion &= mask
			}
			if r.AppliedVersion >= version {
				ob.Obeyed++
			} else {
				ob.Lagging = append(ob.Lagging, r)
			}
		}
		if ob.Obeyed == ob.Live || time.Now().After(deadline) {
			ob.Summary = ob.String()
			return ob, nil
		}
		select {
		case <-ctx.Done():
			ob.Summary = ob.String()
			return ob, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// HeartbeatConfig configures a Heartbeat.
type HeartbeatConfig struct {
	// DB is the control database. Required.
	DB *sql.DB
	// Source is the replica's flag source. Required.
	Source *flagsource.Source
	// Pods are the pods the replica serves.
	Pods []string
	// ID names the replica. Default: host:pid:start time.
	ID string
	// Logger receives failures to report (rate-limited). Default:
	// slog.Default().
	Logger *slog.Logger
}

// Heartbeat reports a replica's applied flags version to the control
// database: at once when its flag source applies a new version (it looks
// every few milliseconds: an in-process evaluation), and every
// HeartbeatInterval otherwise. Stop removes the replica's row: a replica
// that shuts down cleanly leaves the fleet at once.
type Heartbeat struct {
	cfg     HeartbeatConfig
	log     *slog.Logger
	stop    chan struct{}
	done    chan struct{}
	stopped sync.Once
	applied int64
	mu      sync.Mutex
}

// StartHeartbeat starts reporting.
func StartHeartbeat(cfg HeartbeatConfig) *Heartbeat {
	if cfg.ID == "" {
		host, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), time.Now().UTC().Format("20060102T150405.000"))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Heartbeat{cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), done: make(chan struct{}), applied: -1}
	go h.run()
	return h
}

// ID is the replica's id in rollout_replicas.
func (h *Heartbeat) ID() string { return h.cfg.ID }

// Applied is the version last reported (-1 before any).
func (h *Heartbeat) Applied() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.applied
}

func (h *Heartbeat) run() {
	defer close(h.done)
	check := time.NewTicker(5 * time.Millisecond)
	defer check.Stop()
	var last, forgot time.Time
	var failing bool
	for {
		select {
		case <-h.stop:
			return
		case <-check.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		v, ok := h.cfg.Source.AppliedVersion(ctx)
		if !ok {
			v = 0
		}
		if v == h.Applied() && time.Since(last) < HeartbeatInterval {
			cancel()
			continue
		}
		err := controldb.Heartbeat(ctx, h.cfg.DB, h.cfg.ID, strings.Join(h.cfg.Pods, ","), v)
		if err == nil && time.Since(forgot) > time.Minute {
			// Now and then, forget replicas gone for a day (killed without
			// a clean stop); any replica may do it.
			forgot = time.Now()
			err = controldb.ForgetReplicas(ctx, h.cfg.DB, 24*time.Hour)
		}
		cancel()
		if err != nil {
			if !failing {
				h.log.Warn("rollout: heartbeat to the control database failed; retrying", "err", err)
			}
			failing = true
			last = time.Now() // retry at the heartbeat's pace, not every check
			continue
		}
		failing = false
		last = time.Now()
		h.mu.Lock()
		h.applied = v
		h.mu.Unlock()
	}
}

// Stop stops reporting and removes the replica's row (2s at most).
func (h *Heartbeat) Stop() {
	h.stopped.Do(func() {
		close(h.stop)
		<-h.done
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := controldb.DeleteReplica(ctx, h.cfg.DB, h.cfg.ID); err != nil {
			h.log.Warn("rollout: could not remove the replica's heartbeat", "err", err)
		}
	})
}
