package rollout

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Reconciler guards the changes of authority over a pod: before MySQL
// becomes the authority it checks that Redis has a complete view (so the
// kill switch stays lossless), and before a kill switch is released it
// repairs MySQL from Redis.
type Reconciler interface {
	// Clean reports whether the pod has no drift between the stores, with
	// a one-line summary for status and refusals.
	Clean(ctx context.Context, pod string) (clean bool, summary string, err error)
	// RepairFrom makes the pod's other store follow authority (its holds
	// and pools; never the authority itself) for shops (nil: every shop of
	// the pod), with a one-line summary of what it found.
	RepairFrom(ctx context.Context, pod string, authority reservation.Authority, shops []int64) (summary string, err error)
}

// ControllerConfig configures a Controller.
type ControllerConfig struct {
	// DB is the control database (migrated): rollout state and audit.
	// Required.
	DB *sql.DB
	// Flags is the flags file every replica watches. Required.
	Flags FlagsFile
	// Plan is the rollout plan. Required.
	Plan *Plan
	// Stats feeds the gates. Required.
	Stats StatsReader
	// Reconciler guards stages that give MySQL authority. Without one,
	// such a stage is refused unless overridden.
	Reconciler Reconciler
	// Now is the clock. Default: time.Now.
	Now func() time.Time
	// Propagation is how long a flags change takes to reach every replica
	// (each watches the flags file; measured: tens of milliseconds). A
	// release from redis_only waits it between turning dual writes back on
	// and repairing MySQL. Default: 2s.
	Propagation time.Duration
}

// Controller moves the rollout: status, advance, kill switch, history and
// the automatic loop. Every change is written to the flags file, at the
// next version of the flags, and recorded in the audit table (who, when,
// why, before, after).
type Controller struct {
	cfg ControllerConfig
}

// NewController checks cfg and returns a controller.
func NewController(cfg ControllerConfig) (*Controller, error) {
	switch {
	case cfg.DB == nil:
		return nil, errors.New("rollout: ControllerConfig.DB is required")
	case cfg.Flags.Path == "":
		return nil, errors.New("rollout: ControllerConfig.Flags.Path is required")
	case cfg.Plan == nil:
		return nil, errors.New("rollout: ControllerConfig.Plan is required")
	case cfg.Stats == nil:
		return nil, errors.New("rollout: ControllerConfig.Stats is required")
	}
	if err := cfg.Plan.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Propagation == 0 {
		cfg.Propagation = 2 * time.Second
	}
	return &Controller{cfg: cfg}, nil
}

// Status is where the rollout stands.
type Status struct {
	// Stage is the index of the stage in force (-1: none applied yet).
	Stage int `json:"stage"`
	// StageName names it ("" before the first).
	StageName string `json:"stage_name"`
	// Since is when it was applied.
	Since time.Time `json:"since"`
	// Next is the stage advance would apply (nil at the end).
	Next *Stage `json:"next,omitempty"`
	// FlagsVersion is the version of the flags file (Flags.Version).
	FlagsVersion int64 `json:"flags_version"`
	// Pods is each pod's decision for a shop without overrides.
	Pods []PodStatus `json:"pods"`
	// Evidence is what the gates judged.
	Evidence Evidence `json:"evidence"`
	// Gates are the current stage's exit gates with their numbers.
	Gates []GateResult `json:"gates"`
	// Ready is true when every gate passes and a next stage exists.
	Ready bool `json:"ready"`
}

// PodStatus is one pod's flags.
type PodStatus struct {
	Pod  string     `json:"pod"`
	Mode Mode       `json:"mode"`
	Ramp *Ramp      `json:"ramp,omitempty"`
	Kill KillSwitch `json:"kill"`
	// Effective is the decision for a shop of the pod outside any ramp.
	Effective Decision `json:"effective"`
}

const sqlStateRead = `/*caller='rollout'*/ SELECT stage, since FROM rollout_state WHERE id = 1`
const sqlStateWrite = `/*caller='rollout'*/ INSERT INTO rollout_state (id, stage, since) VALUES (1, ?, ?)
  ON DUPLICATE KEY UPDATE stage = VALUES(stage), since = VALUES(since)`
const sqlAuditInsert = `/*caller='rollout'*/ INSERT INTO rollout_audit
  (at, actor, action, scope, reason, stage, before_flags, after_flags) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
const sqlAuditList = `/*caller='rollout'*/ SELECT id, at, actor, action, scope, reason, stage, before_flags, after_flags
  FROM rollout_audit ORDER BY id DESC LIMIT ?`

func (c *Controller) state(ctx context.Context) (stage int, since time.Time, err error) {
	err = c.cfg.DB.QueryRowContext(ctx, sqlStateRead).Scan(&stage, &since)
	if errors.Is(err, sql.ErrNoRows) {
		return -1, time.Time{}, nil
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("rollout: read state: %w", err)
	}
	return stage, since.UTC(), nil
}

// Status evaluates the current stage's gates.
func (c *Controller) Status(ctx context.Context) (Status, error) {
	stage, since, err := c.state(ctx)
	if err != nil {
		return Status{}, err
	}
	flags, err := c.cfg.Flags.Read()
	if err != nil {
		return Status{}, err
	}
	st := Status{Stage: stage, Since: since, FlagsVersion: flags.Version}
	for _, pod := range c.cfg.Plan.Pods {
		pf := flags.Pods[pod]
		st.Pods = append(st.Pods, PodStatus{Pod: pod, Mode: pf.Mode, Ramp: pf.Ramp, Kill: flags.KillAt(PodScope(pod)), Effective: flags.Resolve(pod, 0)})
	}
	if stage+1 < len(c.cfg.Plan.Stages) {
		next := c.cfg.Plan.Stages[stage+1]
		st.Next = &next
	}
	if stage < 0 {
		// Nothing applied yet: the first stage needs no evidence.
		st.Ready = st.Next != nil
		return st, nil
	}
	cur := c.cfg.Plan.Stages[stage]
	st.StageName = cur.Name
	st.Evidence, err = Gather(ctx, c.cfg.Stats, cur.Pods, since)
	if err != nil {
		return Status{}, err
	}
	st.Gates = cur.Gates.Evaluate(st.Evidence, c.cfg.Now().Sub(since))
	st.Ready = AllPass(st.Gates) && st.Next != nil
	return st, nil
}

// AdvanceOptions qualify an advance.
type AdvanceOptions struct {
	// Actor and Reason are recorded. Actor is required; Reason is required
	// with Override.
	Actor, Reason string
	// Override advances although gates fail (audited as an override).
	Override bool
	// DryRun prints the exact flags file change to Out and changes nothing.
	DryRun bool
	// ConfirmMySQLOnly must be set to enter a mysql_only stage: after it
	// the kill switch is no longer lossless.
	ConfirmMySQLOnly bool
	// Out receives the dry-run diff. Default: io.Discard.
	Out io.Writer
}

// ErrGatesFail is returned by Advance when a gate fails; the error text
// names each failing gate with its numbers.
var ErrGatesFail = errors.New("rollout: gates do not pass")

// Advance applies the next stage when the current stage's gates pass (or
// with an audited override), after the safety checks: reconciliation clean
// before MySQL becomes an authority, explicit confirmation before
// mysql_only. It returns the stage applied.
func (c *Controller) Advance(ctx context.Context, o AdvanceOptions) (Stage, error) {
	if o.Actor == "" {
		return Stage{}, errors.New("rollout: advance: an actor is required")
	}
	if o.Override && strings.TrimSpace(o.Reason) == "" {
		return Stage{}, errors.New("rollout: advance: an override needs a reason")
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	st, err := c.Status(ctx)
	if err != nil {
		return Stage{}, err
	}
	if st.Next == nil {
		return Stage{}, fmt.Errorf("rollout: advance: the plan is complete (stage %q is the last)", st.StageName)
	}
	next := *st.Next
	if !AllPass(st.Gates) && !o.Override {
		return Stage{}, fmt.Errorf("%w for stage %q: %s", ErrGatesFail, st.StageName, failing(st.Gates))
	}
	if next.Mode == ModeMySQLOnly && !o.ConfirmMySQLOnly {
		return Stage{}, fmt.Errorf("rollout: advance: stage %q is mysql_only: Redis stops being written and the kill switch is no longer lossless; confirm explicitly", next.Name)
	}
	if next.GivesMySQLAuthority() && !o.Override {
		if err := c.checkClean(ctx, next.Pods); err != nil {
			return Stage{}, err
		}
	}
	action := "advance"
	if o.Override {
		action = "override"
	}
	before, after, err := c.change(ctx, o.DryRun, o.Out, func(f *Flags) error { return next.Apply(f) })
	if err != nil || o.DryRun {
		return next, err
	}
	now := c.cfg.Now().UTC()
	if _, err := c.cfg.DB.ExecContext(ctx, sqlStateWrite, st.Stage+1, now); err != nil {
		return Stage{}, fmt.Errorf("rollout: advance: flags written, state not recorded: %w", err)
	}
	return next, c.audit(ctx, now, o.Actor, action, strings.Join(next.Pods, ","), reasonOr(o.Reason, next.Name), st.Stage+1, before, after)
}

func (c *Controller) checkClean(ctx context.Context, pods []string) error {
	if c.cfg.Reconciler == nil {
		return errors.New("rollout: advance: MySQL would become an authority and no reconciler is configured to prove Redis is complete; override with a reason to proceed")
	}
	for _, pod := range pods {
		clean, summary, err := c.cfg.Reconciler.Clean(ctx, pod)
		if err != nil {
			return fmt.Errorf("rollout: advance: reconcile pod %s: %w", pod, err)
		}
		if !clean {
			return fmt.Errorf("rollout: advance: pod %s is not reconciled (%s): run `reservoir reconcile --pod %s --repair` first, so the kill switch stays lossless", pod, summary, pod)
		}
	}
	return nil
}

func failing(rs []GateResult) string {
	var parts []string
	for _, r := range rs {
		if !r.Pass {
			parts = append(parts, r.Gate+": "+r.Why)
		}
	}
	return strings.Join(parts, "; ")
}

func reasonOr(reason, fallback string) string {
	if strings.TrimSpace(reason) == "" {
		return fallback
	}
	return reason
}

// change applies edit to the flags file, or with dryRun prints the diff it
// would make. A change that changes the flags is written at the file's
// version plus one (FlagsFile.Update), so every replica's decisions carry
// the new version as the epoch of the handoffs it causes. The dry run
// shows that version too: earlier lists the changes the command writes
// before this one (each at its own version), which only the dry run
// applies here, so its diff ends at the state and version the command
// would leave. It returns the rendered files before and after.
func (c *Controller) change(ctx context.Context, dryRun bool, out io.Writer, edit func(*Flags) error, earlier ...func(*Flags) error) (before, after []byte, err error) {
	if dryRun {
		cur, err := c.cfg.Flags.Read()
		if err != nil {
			return nil, nil, err
		}
		next := cur
		for _, e := range append(slices.Clip(earlier), edit) {
			if next, err = nextFlags(next, e); err != nil {
				return nil, nil, err
			}
		}
		if before, err = cur.Render(); err != nil {
			return nil, nil, err
		}
		if after, err = next.Render(); err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(out, "--- %s\n+++ %s (after)\n", c.cfg.Flags.Path, c.cfg.Flags.Path)
		_, err = io.WriteString(out, LineDiff(string(before), string(after)))
		return before, after, err
	}
	b, a, err := c.cfg.Flags.Update(edit)
	if err != nil {
		return nil, nil, err
	}
	if before, err = b.Render(); err != nil {
		return nil, nil, err
	}
	after, err = a.Render()
	return before, after, err
}

func (c *Controller) audit(ctx context.Context, at time.Time, actor, action, scope, reason string, stage int, before, after []byte) error {
	if _, err := c.cfg.DB.ExecContext(ctx, sqlAuditInsert, at, actor, action, scope, reason, stage, string(before), string(after)); err != nil {
		return fmt.Errorf("rollout: %s applied but not audited: %w", action, err)
	}
	return nil
}

// KillOptions qualify a kill switch change.
type KillOptions struct {
	// Actor and Reason are required.
	Actor, Reason string
	// Resynced confirms Redis was rebuilt from MySQL for a scope that runs
	// mysql_only (without it such a kill is refused).
	Resynced bool
	// DryRun prints the diff to Out and changes nothing.
	DryRun bool
	Out    io.Writer
}

// Kill engages the kill switch for a scope: Redis becomes the authority at
// once (state KillRedis keeps dual writes; KillRedisOnly stops touching
// MySQL). A scope running mysql_only has no current Redis view: the kill is
// refused until Redis has been resynced.
func (c *Controller) Kill(ctx context.Context, scope Scope, k Kill, o KillOptions) error {
	if k != KillRedis && k != KillRedisOnly {
		return fmt.Errorf("rollout: kill: state must be %q or %q, got %q", KillRedis, KillRedisOnly, k)
	}
	if o.Actor == "" || strings.TrimSpace(o.Reason) == "" {
		return errors.New("rollout: kill: an actor and a reason are required")
	}
	cur, err := c.cfg.Flags.Read()
	if err != nil {
		return err
	}
	if pods := c.mysqlOnlyUnder(cur, scope); len(pods) > 0 && !o.Resynced {
		return fmt.Errorf("rollout: kill %s: %s runs mysql_only, so Redis has no current view and the switch would lose reservations; "+
			"run `reservoir reconcile --pod %s --repair --from mysql` to rebuild Redis, then kill again with --resynced", scope, strings.Join(pods, ", "), pods[0])
	}
	return c.kill(ctx, scope, "kill", o, func(f *Flags) error {
		return f.EngageKill(scope, k, Attribution{Actor: o.Actor, Reason: o.Reason, At: c.cfg.Now().UTC()})
	})
}

// Release turns a scope's kill switch off.
//
// MySQL is first repaired from Redis, the authority while the switch was
// engaged (Reconciler.RepairFrom), on every pod of the plan the switch
// covers: only the scope's shop for a shop scope, every shop otherwise.
// Shadow writes MySQL lost meanwhile (it was down, say, or the switch was
// redis_only and never wrote it) would otherwise let MySQL, once it
// answers again, sell stock Redis holds for acknowledged carts (whose
// claims the ledger then refuses), and refuse buyers for holds nobody
// owns. A redis_only switch is first turned into a redis one (dual
// writes), and the repair waits Propagation for every replica to write
// MySQL again, so that nothing acknowledged after the repair misses it.
// Without a reconciler the release is refused; a failed repair leaves the
// switch engaged.
func (c *Controller) Release(ctx context.Context, scope Scope, o KillOptions) error {
	if o.Actor == "" || strings.TrimSpace(o.Reason) == "" {
		return errors.New("rollout: release: an actor and a reason are required")
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	cur, err := c.cfg.Flags.Read()
	if err != nil {
		return err
	}
	pods := c.podsUnder(cur, scope, func(d Decision) bool { return d.Kill != KillOff })
	var shops []int64
	if scope.Kind == ScopeShop {
		shops = []int64{scope.Shop}
	}
	redisOnly := cur.KillAt(scope).State == KillRedisOnly
	dual := o
	dual.Reason = "release of redis_only: dual writes before the repair; " + o.Reason
	toDual := func(f *Flags) error {
		return f.EngageKill(scope, KillRedis, Attribution{Actor: o.Actor, Reason: dual.Reason, At: c.cfg.Now().UTC()})
	}
	// earlier is what a dry run applies before the release: the switch to
	// dual writes is a version of its own.
	var earlier []func(*Flags) error
	switch {
	case len(pods) == 0:
	case o.DryRun:
		if redisOnly {
			fmt.Fprintf(o.Out, "would turn the redis_only switch into redis (dual writes) and wait %s\n", c.cfg.Propagation)
			earlier = append(earlier, toDual)
		}
		fmt.Fprintf(o.Out, "would repair MySQL from Redis first on %s\n", strings.Join(pods, ", "))
	case c.cfg.Reconciler == nil:
		return fmt.Errorf("rollout: release: MySQL would answer again on %s and no reconciler is configured to repair it from Redis first", strings.Join(pods, ", "))
	default:
		if redisOnly {
			if err := c.kill(ctx, scope, "kill", dual, toDual); err != nil {
				return err
			}
			fmt.Fprintf(o.Out, "redis_only turned into redis (dual writes); waiting %s for every replica\n", c.cfg.Propagation)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(c.cfg.Propagation):
			}
		}
		for _, pod := range pods {
			summary, err := c.cfg.Reconciler.RepairFrom(ctx, pod, reservation.AuthorityRedis, shops)
			if err != nil {
				return fmt.Errorf("rollout: release: repair pod %s from Redis before MySQL answers again: %w (the kill switch stays engaged)", pod, err)
			}
			fmt.Fprintf(o.Out, "pod %s: MySQL repaired from Redis: %s\n", pod, summary)
		}
	}
	return c.kill(ctx, scope, "release", o, func(f *Flags) error {
		return f.ReleaseKill(scope, Attribution{Actor: o.Actor, Reason: o.Reason, At: c.cfg.Now().UTC()})
	}, earlier...)
}

// kill writes edit (a kill switch change) and audits it as action; earlier
// is for the dry run only (see change).
func (c *Controller) kill(ctx context.Context, scope Scope, action string, o KillOptions, edit func(*Flags) error, earlier ...func(*Flags) error) error {
	if o.Out == nil {
		o.Out = io.Discard
	}
	before, after, err := c.change(ctx, o.DryRun, o.Out, edit, earlier...)
	if err != nil || o.DryRun {
		return err
	}
	stage, _, err := c.state(ctx)
	if err != nil {
		return err
	}
	return c.audit(ctx, c.cfg.Now().UTC(), o.Actor, action, scope.String(), o.Reason, stage, before, after)
}

// podsUnder lists the plan's pods within scope whose decision (for the
// scope's shop, if any) satisfies match.
func (c *Controller) podsUnder(f *Flags, scope Scope, match func(Decision) bool) []string {
	var out []string
	for _, pod := range c.cfg.Plan.Pods {
		if scope.Kind == ScopePod && scope.Pod != pod {
			continue
		}
		if match(f.Resolve(pod, scope.Shop)) {
			out = append(out, pod)
		}
	}
	return out
}

// mysqlOnlyUnder lists the plan's pods within scope whose mode is
// mysql_only.
func (c *Controller) mysqlOnlyUnder(f *Flags, scope Scope) []string {
	return c.podsUnder(f, scope, func(d Decision) bool { return d.Mode == ModeMySQLOnly })
}

// AuditEntry is one recorded change.
type AuditEntry struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Scope  string    `json:"scope"`
	Reason string    `json:"reason"`
	Stage  int       `json:"stage"`
	Before string    `json:"before"`
	After  string    `json:"after"`
}

// History lists the latest changes, newest first.
func (c *Controller) History(ctx context.Context, limit int) ([]AuditEntry, error) {
	if limit <= 0 {
		limit = 50
	}
	rows, err := c.cfg.DB.QueryContext(ctx, sqlAuditList, limit)
	if err != nil {
		return nil, fmt.Errorf("rollout: history: %w", err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var stage sql.NullInt64
		if err := rows.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Scope, &e.Reason, &stage, &e.Before, &e.After); err != nil {
			return nil, err
		}
		e.Stage = int(stage.Int64)
		if !stage.Valid {
			e.Stage = -1
		}
		e.At = e.At.UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

// AutoAction is what one automatic step did.
type AutoAction struct {
	// Did is "none", "advanced" or "killed".
	Did string `json:"did"`
	// Why explains it with the numbers.
	Why string `json:"why"`
}

// AutoStep is one turn of the automatic controller: during a stage where
// MySQL is an authority, a breaking gate (a ceiling exceeded with enough
// data) engages the kill switch for the stage's pods; otherwise, when every
// gate passes, it advances (never into mysql_only, which needs a person).
func (c *Controller) AutoStep(ctx context.Context, actor string) (AutoAction, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return AutoAction{}, err
	}
	if st.Stage >= 0 {
		cur := c.cfg.Plan.Stages[st.Stage]
		if cur.GivesMySQLAuthority() {
			for _, g := range st.Gates {
				if !g.Breaking {
					continue
				}
				why := fmt.Sprintf("auto: gate %s broke in stage %q: %s", g.Gate, cur.Name, g.Why)
				for _, pod := range cur.Pods {
					if c.cfg.Plan != nil && cur.Mode == ModeMySQLOnly {
						return AutoAction{Did: "none", Why: why + "; stage is mysql_only, a person must resync Redis before the kill switch"}, nil
					}
					if err := c.Kill(ctx, PodScope(pod), KillRedis, KillOptions{Actor: actor, Reason: why}); err != nil {
						return AutoAction{}, err
					}
				}
				return AutoAction{Did: "killed", Why: why}, nil
			}
		}
	}
	if !st.Ready {
		return AutoAction{Did: "none", Why: "waiting: " + failingOrDone(st)}, nil
	}
	if st.Next.Mode == ModeMySQLOnly {
		return AutoAction{Did: "none", Why: fmt.Sprintf("gates pass; stage %q is mysql_only and needs a person's confirmation", st.Next.Name)}, nil
	}
	next, err := c.Advance(ctx, AdvanceOptions{Actor: actor, Reason: "auto: gates pass"})
	if err != nil {
		return AutoAction{Did: "none", Why: err.Error()}, nil
	}
	return AutoAction{Did: "advanced", Why: fmt.Sprintf("gates of %q pass; applied %q", st.StageName, next.Name)}, nil
}

func failingOrDone(st Status) string {
	if st.Next == nil {
		return "the plan is complete"
	}
	return failing(st.Gates)
}
