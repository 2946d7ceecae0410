package rollout

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/seed31b0e981/reservoir/internal/controldb"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Reconciler checks that Redis holds everything MySQL decided, before a
// kill switch hands a pod running mysql_only back to Redis
// (internal/reconcile implements it).
type Reconciler interface {
	// Clean reports whether the pod has no drift between the stores, with
	// a one-line summary for status and refusals.
	Clean(ctx context.Context, pod string) (clean bool, summary string, err error)
}

// LagReader reports how far each pod's Redis is behind MySQL's decisions
// (the relay's backlog; package mirror measures it). The kill switch
// reports it at the moment it switches.
type LagReader interface {
	// Lag returns the changes pending for Redis and the age of the oldest.
	Lag(ctx context.Context, pod string) (changes int64, oldest time.Duration, err error)
}

// HandoffReader reports how far each pod's handoffs have come: what the
// fences say beside what the flags say (docs/ownership.md, sections 2 and
// 3). The pod's handoff sweeper (package mirror) writes the report;
// internal/cell reads it.
type HandoffReader interface {
	// Handoffs returns the pod's last handoff report; ok is false before
	// any sweep of the pod reported.
	Handoffs(ctx context.Context, pod string) (p reservation.HandoffProgress, ok bool, err error)
}

// StoreChecker says whether a pod's store answers now (a ping). The cell
// implements it.
type StoreChecker interface {
	// Reachable returns nil when pod's store answers, else why not, in
	// words that name no host or user.
	Reachable(ctx context.Context, pod string, store reservation.Authority) error
}

// ControllerConfig configures a Controller.
type ControllerConfig struct {
	// DB is the control database (migrated): rollout state and audit.
	// Required.
	DB *sql.DB
	// Flags is where the flags every replica follows live: a FlagsFile or
	// the control database's FlagsTable. Required.
	Flags flagdoc.FlagStore
	// Plan is the rollout plan. Optional: without one, Status, Advance and
	// AutoStep answer ErrNoPlan, and the kill switch still works (every
	// change of the flags goes through a controller, plan or not).
	Plan *Plan
	// Stats feeds the gates. Required with a Plan.
	Stats StatsReader
	// Pods are the pods the topology names: a kill switch scope naming
	// another pod is refused (ErrUnknownScope). Default: the plan's pods.
	Pods []string
	// Reconciler checks Redis before a kill switch over mysql_only (it is
	// refused without one unless confirmed with Resynced). Optional.
	Reconciler Reconciler
	// Lag reports each pod's relay lag when the kill switch is engaged.
	// Optional: without it the kill reports no lag.
	Lag LagReader
	// Handoffs reports each pod's handoff progress, for Status (the
	// fences beside the flags). Optional: without it Status reports none.
	Handoffs HandoffReader
	// Stores checks that a pod's store answers before a kill or release
	// moves the pod's shops to it: a switch to a store that is down would
	// turn the pod's calls into 503s instead of serving them, so it is
	// refused while the other store keeps deciding. Optional: without it
	// no store is checked.
	Stores StoreChecker
	// Now is the clock. Default: time.Now.
	Now func() time.Time
	// Propagation is how long a flags change takes to reach every replica
	// (each watches the flags file; measured: tens of milliseconds).
	// Default: 2s.
	Propagation time.Duration
	// ObeyWait bounds how long a kill, release or advance waits for every
	// live replica (one whose heartbeat in rollout_replicas is fresh) to
	// report the new version applied, to say "obeyed by 12/12 replicas in
	// 38 ms" or name the ones that lag. Default: 2s; negative: no wait.
	ObeyWait time.Duration
	// InForce, when set, returns the flags document a flag source in this
	// process answers from (FlagSource.InForce). Over an invalid document,
	// Kill and Release build on it when it is newer than the audit's last
	// valid flags (a valid change made outside the controller, by hand or
	// from git, is then kept). Optional: without it, the audit alone.
	InForce func() (doc []byte, ok bool)
	// Wrote, when set, is called after each change the controller wrote
	// to Flags: the flag source of this process reads it at once
	// (flagsource.Source.PollNow) instead of at its next poll, so the
	// replica that took the change obeys it first, and the fleet's wait
	// (ObeyWait) does not wait a poll interval for it. Optional.
	Wrote func()
	// Modes, with a Flags store that keeps only the kill switch
	// (flagdoc.KillTable), answers the modes of the source reservoir does
	// not write (flagsource.Source.WithoutKills): the kill switch's
	// checks (a kill over mysql_only; the store a kill or release moves
	// shops to) judge the modes in force, with the kill switches of the
	// document they change. Optional: without it the document's modes
	// (a KillTable's are the code defaults) are judged.
	Modes authority.ModeSource
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
	case cfg.Flags == nil:
		return nil, errors.New("rollout: ControllerConfig.Flags is required (a FlagsFile or a FlagsTable)")
	case cfg.Plan != nil && cfg.Stats == nil:
		return nil, errors.New("rollout: ControllerConfig.Stats is required with a Plan (it feeds the gates)")
	case cfg.Plan == nil && len(cfg.Pods) == 0:
		return nil, errors.New("rollout: ControllerConfig.Pods is required without a Plan")
	}
	if cfg.Plan != nil {
		if err := cfg.Plan.Validate(); err != nil {
			return nil, err
		}
		if len(cfg.Pods) == 0 {
			cfg.Pods = cfg.Plan.Pods
		}
		if err := cfg.Plan.CheckPods(cfg.Pods); err != nil {
			return nil, err
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ObeyWait == 0 {
		cfg.ObeyWait = 2 * time.Second
	}
	if cfg.Propagation == 0 {
		cfg.Propagation = 2 * time.Second
	}
	return &Controller{cfg: cfg}, nil
}

// Status is where the rollout stands.
type Status struct {
	// Stage is the index of the stage in force (-1: none applied yet).
	Stage int
	// StageName names it ("" before the first).
	StageName string
	// Since is when it was applied, or when a release covering its pods
	// started its gates again: min_duration counts from it.
	Since time.Time
	// CountingFrom is when the gates' evidence counts from: the start of
	// the first whole stats window (the comparer's, one minute by
	// default) at or after Since, so that no call observed before the
	// stage was applied counts for it: the first window counted, or,
	// before any is, where the next window starts. It may be ahead of
	// now, for up to a window: no observation counts until then. Zero
	// before the first stage (Evidence.Since is the same).
	CountingFrom time.Time
	// Next is the stage advance would apply (nil at the end).
	Next *Stage
	// FlagsVersion is the version of the flags file (Flags.Version).
	FlagsVersion int64
	// VersionBits are the bits of a version a replica reports (its
	// heartbeat, its handoff sweeps) that are FlagsVersion's: 0 for all
	// of them; with the modes served by a source reservoir does not write
	// (a flagdoc.KillTable), the kill switch document's part of the
	// epoch (flagdoc.Epoch), flagdoc.MaxKillVersion.
	VersionBits int64
	// FlagsInvalid says what is wrong with the stored flags document when
	// it does not parse (with its line and column); Pods then show the
	// last valid flags, and Ready is false. A kill switch still works.
	FlagsInvalid string
	// Pods is each pod's decision for a shop without overrides.
	Pods []PodStatus
	// Evidence is what the gates judged.
	Evidence Evidence
	// Gates are the current stage's exit gates with their numbers.
	Gates []GateResult
	// Ready is true when every gate passes and a next stage exists.
	Ready bool
}

// PodStatus is one pod's flags, and what its fences say.
type PodStatus struct {
	Pod  string
	Mode authority.Mode
	Ramp *flagdoc.Ramp
	Kill flagdoc.KillSwitch
	// Effective is the decision for a shop of the pod outside any ramp.
	Effective authority.Decision
	// Handoffs is the pod's last handoff report (ControllerConfig.Handoffs):
	// how far the fences have followed the flags. Nil without a reader,
	// before the pod's first sweep, or when it could not be read
	// (HandoffsError). JudgeHandoffs says what it means for a version.
	Handoffs *reservation.HandoffProgress
	// HandoffsError says why the report could not be read; the status is
	// made all the same (the flags' part does not depend on it).
	HandoffsError string
	// Epoch, with the modes served by a source reservoir does not write
	// (Status.VersionBits), is the version the pod's sweeps report for
	// the flags in force: the epoch of the modes' version, as their source
	// answers now (ControllerConfig.Modes), and the kill switch document's
	// (flagdoc.Epoch). 0 otherwise, or when the modes' source could not
	// say (EpochError).
	Epoch int64
	// EpochError says why the modes' version could not be read.
	EpochError string
}

// HandoffState is what a pod's handoff report says of the flags at one
// version: whether every shop's fences name the store those flags name.
type HandoffState string

// The handoff states.
const (
	// HandoffsDone: the report is of that version and no shop is pending:
	// the fences say what the flags say.
	HandoffsDone HandoffState = "done"
	// HandoffsPending: the report is of that version and some shops are
	// still to hand off: those are decided by the store their fences name.
	HandoffsPending HandoffState = "pending"
	// HandoffsNotReported: there is no report of that version yet (none
	// at all, or one of an older version): the fences may name the store
	// older flags named.
	HandoffsNotReported HandoffState = "not_reported"
	// HandoffsNewer: the report is of a newer version than the one judged:
	// the fences follow flags newer than those.
	HandoffsNewer HandoffState = "newer"
	// HandoffsUnknown: the report could not be read.
	HandoffsUnknown HandoffState = "unknown"
)

// handoffReportStale is how old a report with shops pending may be before
// JudgeHandoffs says so: an active sweeper rewrites it every few hundred
// milliseconds while any is pending, so an old one means no sweeper is
// working on the pod (the lease lost, the replicas down).
const handoffReportStale = 10 * time.Second

// JudgeHandoffs judges a pod's handoff report p (nil: none yet; readErr
// non-empty: it could not be read) against the flags at version, as of
// now, and says it in one line: "handed off 1,204/1,204 shops in 380ms
// (flags version 12)", "3 of 1,204 shops pending, oldest 2s (flags
// version 12)", "no report for flags version 12 yet (last: version 11,
// handed off 3/3 shops in 20ms)". Only HandoffsDone lets a status say
// that the store the flags name decides.
func JudgeHandoffs(p *reservation.HandoffProgress, readErr string, version int64, now time.Time) (HandoffState, string) {
	switch {
	case readErr != "":
		return HandoffsUnknown, "unknown: " + readErr
	case p == nil:
		return HandoffsNotReported, fmt.Sprintf("no report for flags version %d yet (no sweep of the pod has reported)", version)
	case p.FlagsVersion < version:
		return HandoffsNotReported, fmt.Sprintf("no report for flags version %d yet (last: version %d, %s)", version, p.FlagsVersion, handoffWhat(p, now))
	case p.FlagsVersion > version:
		return HandoffsNewer, fmt.Sprintf("reported for flags version %d, newer than version %d: %s", p.FlagsVersion, version, handoffWhat(p, now))
	case p.Pending > 0:
		line := fmt.Sprintf("%s (flags version %d)", handoffWhat(p, now), version)
		if age := now.Sub(p.Updated); age > handoffReportStale {
			line += fmt.Sprintf("; the report is %s old: is the pod's handoff sweeper running?", age.Round(time.Second))
		}
		return HandoffsPending, line
	}
	return HandoffsDone, fmt.Sprintf("%s (flags version %d)", handoffWhat(p, now), version)
}

// epoch is the version pod's sweeps report for the kill switch document
// at version kill beside the modes' source: the epoch of both
// (flagdoc.Epoch).
func (c *Controller) epoch(ctx context.Context, pod string, kill int64) (int64, string) {
	if c.cfg.Modes == nil {
		return 0, "no source of the modes is configured"
	}
	d, err := c.cfg.Modes.Decide(ctx, pod, 0)
	if err != nil {
		return 0, "the modes' source: " + err.Error()
	}
	e, err := flagdoc.Epoch(d.Version, kill)
	if err != nil {
		return 0, err.Error()
	}
	return e, ""
}

// Fences judges pod p's handoff report against the flags of st
// (JudgeHandoffs), and returns the version it judged against: the flags'
// (FlagsVersion), or with the modes served elsewhere (VersionBits) the
// epoch the pod's sweeps report for the modes in force and the kill
// switch document (PodStatus.Epoch); when the modes' version cannot be
// read, the report cannot be judged (HandoffsUnknown).
func (st Status) Fences(p PodStatus, now time.Time) (state HandoffState, line string, version int64) {
	if st.VersionBits == 0 {
		state, line = JudgeHandoffs(p.Handoffs, p.HandoffsError, st.FlagsVersion, now)
		return state, line, st.FlagsVersion
	}
	if p.Epoch == 0 {
		return HandoffsUnknown, "unknown: the version to judge the fences by is the epoch of the modes' version and the kill switch document's, and " + p.EpochError, 0
	}
	state, line = JudgeHandoffs(p.Handoffs, p.HandoffsError, p.Epoch, now)
	return state, line, p.Epoch
}

// handoffWhat is p's summary without its version.
func handoffWhat(p *reservation.HandoffProgress, now time.Time) string {
	if p.Shops == 0 && p.Pending == 0 {
		return "no shop to hand off"
	}
	return p.Summary(now)
}

func (c *Controller) state(ctx context.Context) (stage int, since time.Time, err error) {
	stage, since, err = controldb.ReadState(ctx, c.cfg.DB)
	if errors.Is(err, sql.ErrNoRows) {
		return -1, time.Time{}, nil
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("rollout: read state: %w", err)
	}
	return stage, since.UTC(), nil
}

// ErrNoPlan is returned by Status, Advance and AutoStep of a controller
// without a plan.
var ErrNoPlan = errors.New("rollout: no rollout plan is configured (the topology's plan_file): stages and gates are not available")

// ErrUnknownScope is wrapped by the error of a kill switch change whose
// scope names a pod the controller does not know: written, nobody would
// obey it.
var ErrUnknownScope = errors.New("rollout: unknown scope")

// Plan returns the controller's plan (nil without one), for a caller that
// shows its stages. The plan is shared: do not change it.
func (c *Controller) Plan() *Plan { return c.cfg.Plan }

// Status evaluates the current stage's gates.
func (c *Controller) Status(ctx context.Context) (Status, error) {
	if c.cfg.Plan == nil {
		return Status{}, ErrNoPlan
	}
	stage, since, err := c.state(ctx)
	if err != nil {
		return Status{}, err
	}
	// Over an invalid document the status shows the last valid flags (what
	// a kill switch would build on) and says what is wrong; it is never
	// ready: a stage cannot be written over a document nobody can read.
	flags, over, err := c.flagsForKill(ctx)
	if err != nil {
		return Status{}, err
	}
	st := Status{Stage: stage, Since: since, FlagsVersion: flags.Version, VersionBits: c.killBits()}
	if over != nil {
		st.FlagsInvalid = over.bad.Error() + " (shown: the last valid flags, " + over.from + ")"
	}
	for _, pod := range c.cfg.Pods {
		pf := flags.Pods[pod]
		ps := PodStatus{Pod: pod, Mode: pf.Mode, Ramp: pf.Ramp, Kill: flags.KillAt(flagdoc.PodScope(pod)), Effective: flags.Resolve(pod, 0)}
		if st.VersionBits != 0 {
			ps.Epoch, ps.EpochError = c.epoch(ctx, pod, flags.Version)
		}
		st.Pods = append(st.Pods, ps)
	}
	c.handoffs(ctx, st.Pods)
	if stage+1 < len(c.cfg.Plan.Stages) {
		next := c.cfg.Plan.Stages[stage+1]
		st.Next = &next
	}
	if stage < 0 {
		// Nothing applied yet: the first stage needs no evidence.
		st.Ready = st.Next != nil && st.FlagsInvalid == ""
		return st, nil
	}
	cur := c.cfg.Plan.Stages[stage]
	st.StageName = cur.Name
	st.Evidence, err = gather(ctx, c.cfg.Stats, cur.Pods, since, c.nextWindow(since))
	if err != nil {
		return Status{}, err
	}
	st.CountingFrom = st.Evidence.Since
	st.Gates = cur.Gates.Evaluate(st.Evidence, c.cfg.Now().Sub(since))
	st.Ready = allPass(st.Gates) && st.Next != nil && st.FlagsInvalid == ""
	return st, nil
}

// windowed is a StatsReader that counts in windows of a fixed width, as
// the comparer does (compare_stats rows per window_start).
type windowed interface{ Window() time.Duration }

// nextWindow is where the first stats window at or after since starts, by
// this controller's stats reader's windows (since itself without them):
// where a stage applied at since is expected to start counting, until a
// window the replicas wrote says where it does.
func (c *Controller) nextWindow(since time.Time) time.Time {
	w, ok := c.cfg.Stats.(windowed)
	if !ok || w.Window() <= 0 {
		return since
	}
	if start := since.Truncate(w.Window()); !start.Equal(since) {
		return start.Add(w.Window())
	}
	return since
}

// startStage records stage as in force from now: the time min_duration
// counts from, and from whose next whole stats window the gates count
// (gather). Advance (the CLI's, the admin API's, the dashboard's,
// auto's) and a release that covers the stage's pods both start it here,
// the same way.
func (c *Controller) startStage(ctx context.Context, stage int) (time.Time, error) {
	now := c.cfg.Now().UTC()
	return now, controldb.WriteState(ctx, c.cfg.DB, stage, now)
}

// handoffReadTimeout bounds the read of one pod's handoff report: a pod
// whose MySQL does not answer must not hold the status back.
const handoffReadTimeout = 2 * time.Second

// handoffs fills each pod's handoff report, reading the pods at once. A
// report that cannot be read is said in HandoffsError, never an error of
// the status: the flags' part stands without it.
func (c *Controller) handoffs(ctx context.Context, pods []PodStatus) {
	if c.cfg.Handoffs == nil {
		return
	}
	var wg sync.WaitGroup
	for i := range pods {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, handoffReadTimeout)
			defer cancel()
			p, ok, err := c.cfg.Handoffs.Handoffs(rctx, pods[i].Pod)
			switch {
			case err != nil:
				pods[i].HandoffsError = err.Error()
			case ok:
				pods[i].Handoffs = &p
			}
		})
	}
	wg.Wait()
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
	// Resynced confirms that Redis holds what MySQL decided, for a stage
	// that hands a pod running mysql_only back to Redis, without the relay
	// lag and reconciler checks (which, without a LagReader or a
	// Reconciler, otherwise refuse).
	Resynced bool
	// ConfirmMySQLOnly must be set to enter a mysql_only stage: Redis
	// leaves the request path and follows only through the relay, so the
	// way back depends on the relay (and, if Redis loses its data, on a
	// rebuild by copy and catch-up).
	ConfirmMySQLOnly bool
	// Out receives the dry-run diff, and the fleet's obedience. Default:
	// io.Discard.
	Out io.Writer
	// Fleet, when set, receives how the fleet obeyed the change.
	Fleet *Obedience
	// FromVersion, when set, is the flags version the caller decided
	// from (a dry run's, shown to an operator who then confirmed): if the
	// flags are at another version, nothing is written and the error
	// wraps ErrFlagsChanged, so a confirmation never applies a stage other
	// than the one it was shown.
	FromVersion *int64
}

// ErrGatesFail is wrapped by Advance's error when a gate fails: a
// *GatesError, whose text names each failing gate with its numbers.
var ErrGatesFail = errors.New("rollout: gates do not pass")

// GatesError is Advance's refusal when a gate fails: errors.Is(err,
// ErrGatesFail) holds, and errors.As gives the gates, so a caller can show
// them one by one.
type GatesError struct {
	// Stage is the name of the stage in force, whose gates failed.
	Stage string
	// Gates are every gate's verdict, passing ones included.
	Gates []GateResult
}

func (e *GatesError) Error() string {
	return fmt.Sprintf("%v for stage %q: %s", ErrGatesFail, e.Stage, failing(e.Gates))
}

// Unwrap returns ErrGatesFail.
func (e *GatesError) Unwrap() error { return ErrGatesFail }

// Advance applies the next stage when the current stage's gates pass (or
// with an audited override), after explicit confirmation before
// mysql_only. It returns the stage applied. A stage that gives MySQL the
// decisions needs no reconcile first: each shop's handoff copies Redis's
// state into MySQL as it takes over (docs/ownership.md).
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
	if o.FromVersion != nil && *o.FromVersion != st.FlagsVersion {
		return Stage{}, fmt.Errorf("%w: advance: decided at flags version %d, the flags are at version %d now: look at the status again",
			flagdoc.ErrFlagsChanged, *o.FromVersion, st.FlagsVersion)
	}
	if st.Next == nil {
		return Stage{}, fmt.Errorf("rollout: advance: the plan is complete (stage %q is the last)", st.StageName)
	}
	if st.FlagsInvalid != "" {
		// A stage written on top of a document the replicas refuse would
		// be refused too; a kill switch still works (it writes over it).
		return Stage{}, fmt.Errorf("rollout: advance: the stored flags document is invalid: %s: fix or replace it first", st.FlagsInvalid)
	}
	next := *st.Next
	if !allPass(st.Gates) && !o.Override {
		return Stage{}, &GatesError{Stage: st.StageName, Gates: st.Gates}
	}
	if killed := killedPods(st, next.Pods); len(killed) > 0 && !o.Override {
		// The stage would be written under an engaged kill switch, which
		// keeps deciding in Redis: the stage would look applied and not
		// be, and releasing the switch later would apply it unannounced.
		return Stage{}, fmt.Errorf("%w: advance: the kill switch is engaged on %s, which stage %q covers: release it first "+
			"(`reservoir rollout release --scope pod:NAME --reason R`), or advance with --override and a reason (audited)",
			ErrKillEngaged, strings.Join(killed, ", "), next.Name)
	}
	if err := c.checkLeavingMySQLOnly(ctx, st, next, o.Resynced); err != nil {
		return Stage{}, err
	}
	if next.Mode == authority.ModeMySQLOnly && !o.ConfirmMySQLOnly {
		return Stage{}, fmt.Errorf("rollout: advance: stage %q is mysql_only: Redis leaves the request path and follows MySQL only through the relay (a kill switch back to Redis is then checked by reconcile first); confirm explicitly", next.Name)
	}
	action := "advance"
	if o.Override {
		action = "override"
	}
	if c.cfg.Modes != nil {
		return c.advanceExternal(ctx, st, next, action, o)
	}
	// The advance is audited after the fleet obeyed, with the time the
	// stage started (its gates count from it), not with the flags.
	before, after, err := c.change(ctx, o.DryRun, o.Out, st.FlagsVersion, o.Actor, action, strings.Join(next.Pods, ","), st.Stage, nil,
		func(f *flagdoc.Flags) error { return next.Apply(f) })
	if err != nil || o.DryRun {
		return next, err
	}
	c.obey(ctx, after, o.Out, o.Fleet)
	now, err := c.startStage(ctx, st.Stage+1)
	if err != nil {
		return Stage{}, fmt.Errorf("rollout: advance: flags written, state not recorded: %w", err)
	}
	return next, c.audit(ctx, now, o.Actor, action, strings.Join(next.Pods, ","), reasonOr(o.Reason, next.Name), st.Stage+1, before, after)
}

// advanceExternal is Advance when the modes come from a source reservoir
// does not write (ControllerConfig.Modes): the modes are changed there,
// and the advance records that the next stage is in force, so its gates
// are judged and the automatic controller's kill switch covers its pods.
// It is refused (ErrModesExternal) until the source answers the stage's
// mode for each of its pods (a ramp stage: the stage's mode or the pod's
// previous one, for the pod as a whole); nothing is written to the
// source, and the audit's before and after are empty.
func (c *Controller) advanceExternal(ctx context.Context, st Status, next Stage, action string, o AdvanceOptions) (Stage, error) {
	var behind []string
	for _, pod := range next.Pods {
		d, err := c.cfg.Modes.Decide(ctx, pod, 0)
		switch {
		case err != nil:
			behind = append(behind, fmt.Sprintf("%s (the source does not answer: %v)", pod, err))
		case d.Mode == next.Mode:
		case next.Percent > 0 && d.Mode == c.previousMode(st, pod):
		default:
			behind = append(behind, fmt.Sprintf("%s answers %s", pod, d.Mode))
		}
	}
	if len(behind) > 0 {
		return Stage{}, fmt.Errorf("rollout: advance: stage %q gives %s mode %s, but %s: change the modes where they are served, then advance "+
			"(reservoir then records the stage and judges its gates): %w", next.Name, strings.Join(next.Pods, ", "), next.Mode, strings.Join(behind, "; "), flagdoc.ErrModesExternal)
	}
	if o.DryRun {
		fmt.Fprintf(o.Out, "stage %q: the source already answers it; the advance would record it (nothing is written to the source)\n", next.Name)
		return next, nil
	}
	now, err := c.startStage(ctx, st.Stage+1)
	if err != nil {
		return Stage{}, fmt.Errorf("rollout: advance: %w", err)
	}
	return next, c.audit(ctx, now, o.Actor, action, strings.Join(next.Pods, ","), reasonOr(o.Reason, next.Name), st.Stage+1, nil, nil)
}

// previousMode is the mode the plan gave pod before the stage after st's:
// the last earlier stage that names it, or redis.
func (c *Controller) previousMode(st Status, pod string) authority.Mode {
	for i := st.Stage; i >= 0; i-- {
		if s := c.cfg.Plan.Stages[i]; slices.Contains(s.Pods, pod) {
			return s.Mode
		}
	}
	return authority.ModeRedis
}

// ErrKillEngaged is wrapped by Advance's error when a kill switch covers a
// pod of the next stage (an override advances all the same, audited).
var ErrKillEngaged = errors.New("rollout: a kill switch is engaged")

// ErrRedisNotCurrent is wrapped by Advance's error when the next stage
// hands a pod running mysql_only back to Redis while Redis may lack what
// MySQL decided.
var ErrRedisNotCurrent = errors.New("rollout: Redis is not known to hold what MySQL decided")

// killedPods lists the pods among pods whose kill switch (their own or the
// global one) is engaged.
func killedPods(st Status, pods []string) []string {
	var out []string
	for _, p := range st.Pods {
		if slices.Contains(pods, p.Pod) && p.Effective.Kill != authority.KillOff {
			out = append(out, p.Pod)
		}
	}
	return out
}

// relayBehind is how old the oldest change pending for Redis may be when a
// stage leaves mysql_only. Under traffic the feed is never empty: a relay
// that keeps up delivers each change within milliseconds (and the
// reconciler delivers a shop's pending changes itself before it looks);
// an older one means the relay is stuck or far behind.
const relayBehind = 500 * time.Millisecond

// checkLeavingMySQLOnly refuses a stage that hands a pod running
// mysql_only back to Redis (as decider, or as the store compared) unless
// Redis is current: its relay keeps up (no pending change older than
// relayBehind) and the reconciler finds no drift, or resynced says an
// operator checked it. In mysql_only Redis follows MySQL only through the
// relay; a Redis that lost its data (a flush, a failover) would decide
// from a hole.
func (c *Controller) checkLeavingMySQLOnly(ctx context.Context, st Status, next Stage, resynced bool) error {
	if next.Mode == authority.ModeMySQLOnly || resynced {
		return nil
	}
	for _, p := range st.Pods {
		if !slices.Contains(next.Pods, p.Pod) || p.Effective.Mode != authority.ModeMySQLOnly {
			continue
		}
		if c.cfg.Lag == nil || c.cfg.Reconciler == nil {
			return fmt.Errorf("%w: advance: pod %s runs mysql_only and stage %q hands it back to Redis; without a relay lag reader and a reconciler "+
				"the controller cannot check Redis: check it (`reservoir reconcile --pod %s`), then advance with --resynced", ErrRedisNotCurrent, p.Pod, next.Name, p.Pod)
		}
		n, oldest, err := c.cfg.Lag.Lag(ctx, p.Pod)
		if err != nil {
			return fmt.Errorf("%w: advance: pod %s: read its relay lag: %w", ErrRedisNotCurrent, p.Pod, err)
		}
		if n > 0 && oldest >= relayBehind {
			return fmt.Errorf("%w: advance: pod %s's relay is behind: %d change(s) for Redis pending, the oldest %s old: wait for it to catch up, then advance",
				ErrRedisNotCurrent, p.Pod, n, oldest.Round(time.Millisecond))
		}
		clean, summary, err := c.cfg.Reconciler.Clean(ctx, p.Pod)
		if err != nil {
			return fmt.Errorf("%w: advance: pod %s: reconcile: %w", ErrRedisNotCurrent, p.Pod, err)
		}
		if !clean {
			return fmt.Errorf("%w: advance: pod %s: Redis does not hold what MySQL decided (%s): run `reservoir reconcile --pod %s --repair`, then advance",
				ErrRedisNotCurrent, p.Pod, summary, p.Pod)
		}
	}
	return nil
}

// failing lists the gates that do not pass, each with its verdict and
// numbers: "min_duration not yet: in force for 27s, need 30s; ...".
func failing(rs []GateResult) string {
	var parts []string
	for _, r := range rs {
		if !r.Pass {
			parts = append(parts, r.Line())
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

// change applies edit to the flags, or with dryRun prints the diff it
// would make. The caller decided from the flags at version: if another
// writer changed them since, nothing is written, the refused attempt is
// audited (action + "_conflict") and the error wraps ErrFlagsChanged,
// naming both versions. A change that changes the flags is written at
// their version plus one, so every replica's decisions carry the new
// version as the epoch of the handoffs it causes; the dry run shows that
// version too. It returns the rendered flags before and after.
//
// With reason not nil the change is audited as action with *reason: in
// the flags' own transaction when the store allows (auditTx), so the
// change and its record land together or not at all, in one commit
// where the operator waited for two in a row; else right after the
// write, as before. With nil the caller audits it.
func (c *Controller) change(ctx context.Context, dryRun bool, out io.Writer, version int64, actor, action, scope string, stage int,
	reason *string, edit func(*flagdoc.Flags) error) (before, after []byte, err error) {
	if dryRun {
		cur, err := c.cfg.Flags.Read()
		if err != nil {
			return nil, nil, err
		}
		next, err := flagdoc.NextFlags(cur, edit)
		if err != nil {
			return nil, nil, err
		}
		if before, err = renderBefore(cur); err != nil {
			return nil, nil, err
		}
		if after, err = next.Render(); err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(out, "--- %s\n+++ %s (after)\n", c.cfg.Flags, c.cfg.Flags)
		_, err = io.WriteString(out, lineDiff(string(before), string(after)))
		return before, after, err
	}
	var b, a *flagdoc.Flags
	ts, inTx := c.auditTx()
	if reason != nil && inTx {
		b, a, err = ts.UpdateAtTx(version, edit, func(ctx context.Context, tx *sql.Tx, b, a *flagdoc.Flags) error {
			var err error
			if before, err = renderBefore(b); err != nil {
				return err
			}
			if after, err = a.Render(); err != nil {
				return err
			}
			return c.insertAudit(ctx, tx, c.cfg.Now().UTC(), actor, action, scope, *reason, stage, before, after)
		})
	} else {
		b, a, err = c.cfg.Flags.UpdateAt(version, edit)
	}
	if errors.Is(err, flagdoc.ErrFlagsChanged) {
		if aerr := c.audit(ctx, c.cfg.Now().UTC(), actor, action+"_conflict", scope, err.Error(), stage, nil, nil); aerr != nil {
			err = errors.Join(err, aerr)
		}
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, err
	}
	c.wrote()
	if reason != nil && inTx {
		return before, after, nil // rendered for the audit, in the transaction
	}
	if before, err = renderBefore(b); err != nil {
		return nil, nil, err
	}
	if after, err = a.Render(); err != nil {
		return nil, nil, err
	}
	if reason != nil {
		err = c.audit(ctx, c.cfg.Now().UTC(), actor, action, scope, *reason, stage, before, after)
	}
	return before, after, err
}

// wrote tells this process's flag source that the controller wrote a
// change (ControllerConfig.Wrote).
func (c *Controller) wrote() {
	if c.cfg.Wrote != nil {
		c.cfg.Wrote()
	}
}

// auditTx returns the flag store when an audit row can join its
// transactions: a TxStore on the controller's own database (a flags file
// cannot, nor a table in another database).
func (c *Controller) auditTx() (flagdoc.TxStore, bool) {
	ts, ok := c.cfg.Flags.(flagdoc.TxStore)
	if !ok || ts.Database() != c.cfg.DB {
		return nil, false
	}
	return ts, true
}

// renderBefore renders the flags a change started from, for its diff and
// audit: none (nil) when there was no document yet (noDocument, version
// 0, which Render refuses: no document carries it).
func renderBefore(f *flagdoc.Flags) ([]byte, error) {
	if f.Version == 0 {
		return nil, nil
	}
	return f.Render()
}

// audit records a change already applied, in a transaction of its own.
func (c *Controller) audit(ctx context.Context, at time.Time, actor, action, scope, reason string, stage int, before, after []byte) error {
	if err := controldb.InsertAudit(ctx, c.cfg.DB, auditRow(at, actor, action, scope, reason, stage, before, after)); err != nil {
		return fmt.Errorf("rollout: %s applied but not audited: %w", action, err)
	}
	return nil
}

// insertAudit records a change in tx, the transaction that writes it:
// when it fails, the change is rolled back with it.
func (c *Controller) insertAudit(ctx context.Context, tx *sql.Tx, at time.Time, actor, action, scope, reason string, stage int, before, after []byte) error {
	if err := controldb.InsertAudit(ctx, tx, auditRow(at, actor, action, scope, reason, stage, before, after)); err != nil {
		return fmt.Errorf("rollout: %s not applied: its audit could not be written: %w", action, err)
	}
	return nil
}

// auditRow is the audit table's row of a change.
func auditRow(at time.Time, actor, action, scope, reason string, stage int, before, after []byte) controldb.AuditRow {
	return controldb.AuditRow{At: at, Actor: actor, Action: action, Scope: scope, Reason: reason,
		Stage: sql.NullInt64{Int64: int64(stage), Valid: true}, Before: string(before), After: string(after)}
}

// KillOptions qualify a kill switch change.
type KillOptions struct {
	// Actor and Reason are required.
	Actor, Reason string
	// Resynced confirms that Redis holds what MySQL decided, for a scope
	// that runs mysql_only, without the reconcile check (which, without a
	// Reconciler, is otherwise refused).
	Resynced bool
	// DryRun prints the diff to Out and changes nothing.
	DryRun bool
	// Out receives the relay lag, the dry-run diff and the fleet's
	// obedience. Default: io.Discard.
	Out io.Writer
	// Fleet, when set, receives how the fleet obeyed the change.
	Fleet *Obedience
}

// ErrKillRefused is wrapped by Kill's error when it refuses to engage the
// switch over a scope running mysql_only whose Redis it could not show to
// hold what MySQL decided (nothing was written).
var ErrKillRefused = errors.New("rollout: kill refused")

// Kill engages the kill switch for a scope: Redis decides again (state
// KillRedis keeps comparing with MySQL's shadow; KillRedisOnly stops
// touching MySQL's reservation tables). Each shop moves on its next call:
// its handoff drains MySQL's change feed into Redis first, so the switch
// loses nothing the relay had not delivered yet. The kill reports the
// relay's lag per pod at the moment it switched (to Out, and in the
// audit's reason).
//
// A scope running mysql_only is checked first: the relay keeps Redis
// following MySQL there too, but if Redis lost its data (a flush, a
// failover) the drain cannot bring it back, so the kill is refused while
// the reconciler finds drift (`reservoir reconcile --repair` rebuilds
// Redis by copy and catch-up), unless o.Resynced confirms it.
//
// The kill works whatever the state of the flags: when the store holds a
// document ParseFlags refuses (an *InvalidFlagsError), Kill writes a valid
// one instead, built from the last valid flags (the audit's, or
// ControllerConfig.InForce's when newer; else the code defaults) plus the
// kill, at a version above every one seen, and audits
// it as "kill_over_invalid" with the invalid document as before_flags
// (killover.go). Out says what it was built from.
func (c *Controller) Kill(ctx context.Context, scope flagdoc.Scope, k authority.Kill, o KillOptions) error {
	if k != authority.KillRedis && k != authority.KillRedisOnly {
		return fmt.Errorf("rollout: kill: state must be %q or %q, got %q", authority.KillRedis, authority.KillRedisOnly, k)
	}
	if o.Actor == "" || strings.TrimSpace(o.Reason) == "" {
		return errors.New("rollout: kill: an actor and a reason are required")
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if err := c.knownScope(scope); err != nil {
		return err
	}
	ks, err := c.startKill(ctx, scope, true)
	if err != nil {
		return err
	}
	cur, lag := ks.cur, ks.lag
	if pods := c.mysqlOnlyUnder(ctx, cur, scope); len(pods) > 0 && !o.Resynced {
		if c.cfg.Reconciler == nil {
			return fmt.Errorf("%w over %s: %s runs mysql_only and no reconciler is configured to check that Redis holds what MySQL decided; "+
				"check it, then kill again with --resynced", ErrKillRefused, scope, strings.Join(pods, ", "))
		}
		for _, pod := range pods {
			clean, summary, err := c.cfg.Reconciler.Clean(ctx, pod)
			if err != nil {
				return fmt.Errorf("%w over %s: check pod %s: %w", ErrKillRefused, scope, pod, err)
			}
			if !clean {
				return fmt.Errorf("%w over %s: pod %s runs mysql_only and Redis does not hold what MySQL decided (%s); "+
					"run `reservoir reconcile --pod %s --repair` to rebuild Redis, then kill again", ErrKillRefused, scope, pod, summary, pod)
			}
		}
		lag = c.lag(ctx, scope) // the checks took their time: the lag at the switch is the lag now
	}
	attribution := flagdoc.Attribution{Actor: o.Actor, Reason: o.Reason, At: c.cfg.Now().UTC()}
	edit := func(f *flagdoc.Flags) error { return f.EngageKill(scope, k, attribution) }
	if err := c.checkTarget(ctx, cur, scope, "kill", edit); err != nil {
		return err
	}
	if lag != "" && !o.DryRun {
		fmt.Fprintf(o.Out, "relay lag at the switch: %s\n", lag)
	}
	if lag != "" {
		o.Reason += " [relay lag at the switch: " + lag + "]" // the audit's reason; the flags keep the operator's
	}
	if ks.over != nil {
		return c.killOverInvalid(ctx, scope, "kill", ks.stage, cur, ks.over, o, edit)
	}
	return c.kill(ctx, scope, "kill", ks.stage, cur.Version, o, edit)
}

// killStart is what a kill switch change reads before it decides.
type killStart struct {
	// cur are the flags the change builds on, over the plan to write over
	// an invalid document (flagsForKill).
	cur  *flagdoc.Flags
	over *overInvalid
	// stage is the rollout's stage in force, for the audit (-1: none).
	stage int
	// lag is the relay lag of the scope's pods (a kill only).
	lag string
}

// startKill reads what a kill switch change over scope decides on, the
// reads side by side: the flags (with the replicas' versions that judge
// them), the stage and, withLag, the relay lag. None depends on another,
// and while the checkout listener is flooded each round trip waits
// behind the flood (BENCHMARKS.md, the kill switch under a flood): the
// operator waits for the slowest of them, not for their sum.
func (c *Controller) startKill(ctx context.Context, scope flagdoc.Scope, withLag bool) (killStart, error) {
	var (
		ks                 killStart
		flagsErr, stateErr error
		wg                 sync.WaitGroup
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		ks.cur, ks.over, flagsErr = c.flagsForKill(ctx) // over an invalid document: the last valid flags
	}()
	go func() {
		defer wg.Done()
		ks.stage, _, stateErr = c.state(ctx)
	}()
	if withLag {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ks.lag = c.lag(ctx, scope)
		}()
	}
	wg.Wait()
	if flagsErr != nil {
		return ks, flagsErr
	}
	return ks, stateErr
}

// checkTarget refuses a kill or release (action) that would move a pod's
// shops within scope to a store that does not answer (ControllerConfig.
// Stores): the edit is tried on a copy of the flags, and each pod whose
// deciding store it changes has the new one pinged. A shop scope is
// judged by its pods' own shops' decisions.
func (c *Controller) checkTarget(ctx context.Context, cur *flagdoc.Flags, scope flagdoc.Scope, action string, edit func(*flagdoc.Flags) error) error {
	if c.cfg.Stores == nil {
		return nil
	}
	after := cur.Clone()
	if err := edit(after); err != nil {
		return nil // the edit's own error is reported by the change itself
	}
	for _, pod := range c.cfg.Pods {
		if scope.Kind == flagdoc.ScopePod && scope.Pod != pod {
			continue
		}
		from, to := c.resolve(ctx, cur, pod, scope.Shop).Route().Authority, c.resolve(ctx, after, pod, scope.Shop).Route().Authority
		if from == to {
			continue
		}
		if err := c.cfg.Stores.Reachable(ctx, pod, to); err != nil {
			what := "%w over %s" // "rollout: kill refused over pod:pod-a"
			if action != "kill" {
				what = "%w: " + action + " over %s"
			}
			return fmt.Errorf(what+": pod %s's %s cannot take its shops now (%v): they would answer 503 instead of being served; "+
				"%s keeps deciding them meanwhile. Wait until %s can (GET /readyz lists the pod as degraded while a store does not answer), then %s again",
				ErrKillRefused, scope, pod, to, err, from, to, action)
		}
	}
	return nil
}

// lag describes the relay lag of the pods within scope, read side by
// side.
func (c *Controller) lag(ctx context.Context, scope flagdoc.Scope) string {
	if c.cfg.Lag == nil {
		return ""
	}
	var pods []string
	for _, pod := range c.cfg.Pods {
		if scope.Kind != flagdoc.ScopePod || scope.Pod == pod {
			pods = append(pods, pod)
		}
	}
	parts := make([]string, len(pods))
	var wg sync.WaitGroup
	for i, pod := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, oldest, err := c.cfg.Lag.Lag(ctx, pod)
			if err != nil {
				parts[i] = fmt.Sprintf("%s unknown (%v)", pod, err)
				return
			}
			parts[i] = fmt.Sprintf("%s %d change(s), oldest %s", pod, n, oldest.Round(time.Millisecond))
		}()
	}
	wg.Wait()
	return strings.Join(parts, "; ")
}

// Release turns a scope's kill switch off. Nothing needs repairing first:
// where the mode gives MySQL the decisions again, each shop's handoff
// copies Redis's state into MySQL as it takes over (docs/ownership.md), so
// what Redis decided while the switch was engaged, and anything MySQL's
// shadow missed, reaches MySQL before MySQL decides.
//
// Like Kill, Release works over an invalid flags document
// ("release_over_invalid").
func (c *Controller) Release(ctx context.Context, scope flagdoc.Scope, o KillOptions) error {
	if o.Actor == "" || strings.TrimSpace(o.Reason) == "" {
		return errors.New("rollout: release: an actor and a reason are required")
	}
	if err := c.knownScope(scope); err != nil {
		return err
	}
	ks, err := c.startKill(ctx, scope, false)
	if err != nil {
		return err
	}
	edit := func(f *flagdoc.Flags) error {
		return f.ReleaseKill(scope, flagdoc.Attribution{Actor: o.Actor, Reason: o.Reason, At: c.cfg.Now().UTC()})
	}
	if err := c.checkTarget(ctx, ks.cur, scope, "release", edit); err != nil {
		return err
	}
	if ks.over != nil {
		err = c.killOverInvalid(ctx, scope, "release", ks.stage, ks.cur, ks.over, o, edit)
	} else {
		err = c.kill(ctx, scope, "release", ks.stage, ks.cur.Version, o, edit)
	}
	if err != nil || o.DryRun {
		return err
	}
	return c.restartWindow(ctx, scope)
}

// restartWindow starts the gates of the stage in force again when a
// released kill switch covered its pods (its pod switch, or the global
// one): what the gates counted before the release is the incident the
// switch was engaged for, and judged on it the stage would stay failing
// (and the automatic controller would engage the switch again at once)
// however well the stores now agree. The stage starts again as an advance
// starts it (startStage): min_duration counts from the release, the
// evidence from the stats' next whole window. It needs the plan (which
// pods the stage covers): every controller that releases should have it
// when there is one.
func (c *Controller) restartWindow(ctx context.Context, scope flagdoc.Scope) error {
	if c.cfg.Plan == nil || scope.Kind == flagdoc.ScopeShop {
		return nil
	}
	stage, _, err := c.state(ctx)
	if err != nil || stage < 0 || stage >= len(c.cfg.Plan.Stages) {
		return err
	}
	if cur := c.cfg.Plan.Stages[stage]; scope.Kind == flagdoc.ScopePod && !slices.Contains(cur.Pods, scope.Pod) {
		return nil
	}
	if _, err := c.startStage(ctx, stage); err != nil {
		return fmt.Errorf("rollout: release: restart the gates' window: %w", err)
	}
	return nil
}

// knownScope refuses a scope naming a pod the controller does not know.
func (c *Controller) knownScope(scope flagdoc.Scope) error {
	if err := scope.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnknownScope, err)
	}
	if scope.Kind == flagdoc.ScopePod && !slices.Contains(c.cfg.Pods, scope.Pod) {
		return fmt.Errorf("%w: no pod %q (pods: %s)", ErrUnknownScope, scope.Pod, strings.Join(c.cfg.Pods, ", "))
	}
	return nil
}

// kill writes edit (a kill switch change, decided from the flags at
// version), audits it as action at stage (in the same transaction where
// the store allows: change) and waits for the fleet to obey.
func (c *Controller) kill(ctx context.Context, scope flagdoc.Scope, action string, stage int, version int64, o KillOptions, edit func(*flagdoc.Flags) error) error {
	if o.Out == nil {
		o.Out = io.Discard
	}
	_, after, err := c.change(ctx, o.DryRun, o.Out, version, o.Actor, action, scope.String(), stage, &o.Reason, edit)
	if err != nil || o.DryRun {
		return err
	}
	c.obey(ctx, after, o.Out, o.Fleet)
	return nil
}

// obey waits (ObeyWait at most) for the live replicas to apply the flags
// rendered as after, prints how they did to out and fills into.
func (c *Controller) obey(ctx context.Context, after []byte, out io.Writer, into *Obedience) {
	if c.cfg.ObeyWait < 0 {
		return
	}
	f, err := flagdoc.ParseFlags(after)
	if err != nil {
		return
	}
	ob, err := waitObeyed(ctx, c.cfg.DB, f.Version, c.cfg.ObeyWait, c.killBits())
	if err != nil {
		fmt.Fprintf(out, "could not tell whether the fleet obeys: %v\n", err)
		return
	}
	if out != nil {
		fmt.Fprintln(out, ob.String())
	}
	if into != nil {
		*into = ob
	}
}

// podsUnder lists the plan's pods within scope whose decision (for the
// scope's shop, if any) satisfies match.
func (c *Controller) podsUnder(ctx context.Context, f *flagdoc.Flags, scope flagdoc.Scope, match func(authority.Decision) bool) []string {
	var out []string
	for _, pod := range c.cfg.Pods {
		if scope.Kind == flagdoc.ScopePod && scope.Pod != pod {
			continue
		}
		if match(c.resolve(ctx, f, pod, scope.Shop)) {
			out = append(out, pod)
		}
	}
	return out
}

// resolve is f's decision for the shop of pod, with the modes of
// ControllerConfig.Modes when set (f then keeps only kill switches): the
// stronger kill switch of the two wins, as on every replica. A mode
// source that cannot answer leaves the code default (redis), as f's own
// Resolve does over an evaluation error.
func (c *Controller) resolve(ctx context.Context, f *flagdoc.Flags, pod string, shop int64) authority.Decision {
	d := f.Resolve(pod, shop)
	if c.cfg.Modes == nil {
		return d
	}
	m, err := c.cfg.Modes.Decide(ctx, pod, shop)
	if err != nil {
		m = authority.RedisSafe
	}
	if d.Kill.Strength() > m.Kill.Strength() {
		m.Kill = d.Kill
	}
	return m
}

// mysqlOnlyUnder lists the plan's pods within scope whose mode is
// mysql_only.
func (c *Controller) mysqlOnlyUnder(ctx context.Context, f *flagdoc.Flags, scope flagdoc.Scope) []string {
	return c.podsUnder(ctx, f, scope, func(d authority.Decision) bool { return d.Mode == authority.ModeMySQLOnly })
}

// AuditEntry is one recorded change.
type AuditEntry struct {
	ID     int64
	At     time.Time
	Actor  string
	Action string
	Scope  string
	Reason string
	Stage  int
	Before string
	After  string
}

// History lists the latest changes, newest first.
func (c *Controller) History(ctx context.Context, limit int) ([]AuditEntry, error) {
	if limit <= 0 {
		limit = 50
	}
	rows, err := controldb.ListAudit(ctx, c.cfg.DB, limit)
	if err != nil {
		return nil, fmt.Errorf("rollout: history: %w", err)
	}
	var out []AuditEntry
	for _, r := range rows {
		e := AuditEntry{ID: r.ID, At: r.At.UTC(), Actor: r.Actor, Action: r.Action, Scope: r.Scope, Reason: r.Reason,
			Stage: int(r.Stage.Int64), Before: r.Before, After: r.After}
		if !r.Stage.Valid {
			e.Stage = -1
		}
		out = append(out, e)
	}
	return out, nil
}

// AutoAction is what one automatic step did.
type AutoAction struct {
	// Did is "none", "advanced" or "killed".
	Did string
	// Why explains it with the numbers.
	Why string
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
				if cur.Mode == authority.ModeMySQLOnly {
					return AutoAction{Did: "none", Why: why + "; stage is mysql_only: a person engages the kill switch there (it is checked by reconcile first)"}, nil
				}
				// A pod the kill switch already holds (this step's earlier
				// turn, a person, a global switch) is left as it is: a
				// second kill would only add a flags version and an audit
				// entry.
				var killed []string
				for _, ps := range st.Pods {
					if slices.Contains(cur.Pods, ps.Pod) && ps.Effective.Kill.Strength() > 0 {
						killed = append(killed, ps.Pod)
					}
				}
				var did []string
				for _, pod := range cur.Pods {
					if slices.Contains(killed, pod) {
						continue
					}
					if err := c.Kill(ctx, flagdoc.PodScope(pod), authority.KillRedis, KillOptions{Actor: actor, Reason: why}); err != nil {
						return AutoAction{}, err
					}
					did = append(did, pod)
				}
				if len(did) == 0 {
					return AutoAction{Did: "none", Why: why + "; the kill switch already holds " + strings.Join(killed, ", ")}, nil
				}
				return AutoAction{Did: "killed", Why: why}, nil
			}
		}
	}
	if !st.Ready {
		return AutoAction{Did: "none", Why: "waiting: " + failingOrDone(st)}, nil
	}
	if st.Next.Mode == authority.ModeMySQLOnly {
		return AutoAction{Did: "none", Why: fmt.Sprintf("gates pass; stage %q is mysql_only and needs a person's confirmation", st.Next.Name)}, nil
	}
	next, err := c.Advance(ctx, AdvanceOptions{Actor: actor, Reason: "auto: gates pass"})
	if err != nil {
		return AutoAction{Did: "none", Why: err.Error()}, nil
	}
	return AutoAction{Did: "advanced", Why: fmt.Sprintf("gates of %q pass; applied %q", st.StageName, next.Name)}, nil
}

// failingOrDone says why a status is not ready to advance.
func failingOrDone(st Status) string {
	switch {
	case st.Next == nil:
		return "the plan is complete"
	case st.FlagsInvalid != "":
		return "the stored flags document is invalid: " + st.FlagsInvalid
	}
	return failing(st.Gates)
}
