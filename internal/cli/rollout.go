package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/rollout"
)

const rolloutSynopsis = `rollout --topology FILE [--plan FILE] ACTION [flags]

actions:
  init       [--from FILE]                   write the first flags (every shop in redis mode, or a flags
                                             file's, at its version) where the topology's flags live,
                                             unless there are some
  status     [--json]                        the stage in force, each pod's mode, each gate with its numbers
  advance    [--dry-run] [--override --reason R] [--confirm-mysql-only] [--resynced]
                                             apply the next stage when the gates pass; refused while a
                                             kill switch covers its pods (--override: audited), and, for
                                             a stage leaving mysql_only, until Redis is current
  kill       --scope S --reason R [--state redis|redis_only] [--resynced] [--dry-run]
                                             engage the kill switch (S: global, pod:NAME, shop:ID);
                                             prints the relay lag at the switch (each shop's handoff
                                             drains it into Redis); over mysql_only it is refused while
                                             the reconciler finds drift: reconcile --pod NAME --repair
  release    --scope S --reason R [--dry-run]
                                             turn it off (nothing to repair first: each shop's handoff
                                             copies Redis's state into MySQL)
  history    [--limit N]                     every change: who, when, why
  auto       [--interval D] [--once]         advance when gates pass; kill the stage's pods when one breaks
  order-pods [--since D]                     the pods ordered by observed traffic, lowest first`

// printReplicas lists the live replicas and the flags version each
// applied, marking those behind the newest.
func printReplicas(out io.Writer, rs []rollout.Replica) {
	if len(rs) == 0 {
		fmt.Fprintln(out, "\nreplicas: none reports to the control database (each `reservoir serve` does)")
		return
	}
	newest := int64(0)
	for _, r := range rs {
		newest = max(newest, r.AppliedVersion)
	}
	fmt.Fprintf(out, "\nreplicas (%d live):\n", len(rs))
	for _, r := range rs {
		mark := ""
		if r.AppliedVersion < newest {
			mark = "  <- behind"
		}
		fmt.Fprintf(out, "  %-40s pods %-20s flags version %-6d applied %s, seen %s ago%s\n", r.ID, strings.Join(r.Pods, ","),
			r.AppliedVersion, r.AppliedAt.Format(time.RFC3339), r.SeenAgo.Round(time.Millisecond), mark)
	}
}

// initFlags writes the first flags document (every shop in redis mode,
// the kill switch off) where the topology's flags live, unless there is
// one: replicas that find none serve nothing (they cannot tell which store
// decides).
//
// With from, the flags file's flags are copied at their version: the
// stores remember the version of each shop's last handoff and treat older
// flags as stale, so a fleet moved mid-rollout from a file to the database
// must keep counting from the file's version.
func initFlags(env *operatorEnv, from string, out io.Writer) error {
	store := env.cell.FlagStore()
	cur, err := store.Read()
	switch {
	case err == nil:
		fmt.Fprintf(out, "the %s already holds flags (version %d); nothing written\n", store, cur.Version)
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	first, what := rollout.NewFlags(), "every shop in redis mode, kill switch off"
	if from != "" {
		if first, err = (rollout.FlagsFile{Path: from}).Read(); err != nil {
			return fmt.Errorf("--from: %w", err)
		}
		what = fmt.Sprintf("copied from %s at version %d", from, first.Version)
	}
	if err := store.Write(first); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote the first flags to the %s: %s\n", store, what)
	return nil
}

func runRollout(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("rollout", rolloutSynopsis, errOut)
	topo := topologyFlag(fs)
	planPath := fs.String("plan", "", "rollout plan (TOML) (default: the topology's plan_file)")
	actor := fs.String("actor", defaultActor(), "who is acting, for the audit (default $USER)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	action, rest := fs.Arg(0), fs.Args()[1:]
	sub := newFlags("rollout "+action, rolloutSynopsis, errOut)
	asJSON := sub.Bool("json", false, "status: print JSON")
	dryRun := sub.Bool("dry-run", false, "print exactly what would change in the flags file, change nothing")
	override := sub.Bool("override", false, "advance: although gates fail (needs --reason; audited)")
	reason := sub.String("reason", "", "why (required for kill, release and overrides)")
	confirm := sub.Bool("confirm-mysql-only", false, "advance: confirm entering a mysql_only stage")
	scope := sub.String("scope", "", "kill/release: global, pod:NAME or shop:ID")
	state := sub.String("state", "redis", "kill: redis (MySQL keeps a shadow, compared) or redis_only (stop touching MySQL's reservation tables)")
	resynced := sub.Bool("resynced", false, "kill, advance: a scope or stage leaving mysql_only: skip the checks that Redis holds what MySQL decided (you checked it)")
	limit := sub.Int("limit", 50, "history: how many changes")
	from := sub.String("from", "", "init: copy this flags file (its flags and version) instead of writing redis everywhere: moving a fleet from a flags file to the control database")
	interval := sub.Duration("interval", 15*time.Second, "auto: time between steps")
	once := sub.Bool("once", false, "auto: one step, then exit")
	since := sub.Duration("since", 24*time.Hour, "order-pods: how far back to count traffic")
	if err := parseFlags(sub, rest); err != nil {
		return err
	}
	env, err := openOperatorEnv(ctx, *topo)
	if err != nil {
		return err
	}
	defer env.Close()
	if *planPath == "" {
		*planPath = env.topo.PlanFile
	}
	if action == "order-pods" {
		return orderPods(ctx, env, *since, out)
	}
	if action == "init" {
		return initFlags(env, *from, out)
	}
	// Without a plan the kill switch and the history still work; status,
	// advance and auto need one (rollout.ErrNoPlan says so).
	var plan *rollout.Plan
	if *planPath != "" {
		if plan, err = rollout.LoadPlan(*planPath); err != nil {
			return err
		}
	}
	// The cell's control database: opened from the topology with its
	// secrets and TLS settings (control_tls_ca).
	ctl, err := rollout.NewController(rollout.ControllerConfig{DB: env.cell.Control, Flags: env.cell.FlagStore(), Plan: plan, Pods: env.topo.PodNames(),
		Stats: env.cell.Comparer, Reconciler: env.cell.Reconciler, Lag: env.cell})
	if err != nil {
		return err
	}
	switch action {
	case "status":
		st, err := ctl.Status(ctx)
		if err != nil && !errors.Is(err, rollout.ErrNoPlan) {
			return err
		}
		replicas, rerr := rollout.Replicas(ctx, env.cell.Control)
		if rerr != nil {
			return rerr
		}
		if *asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			view := struct {
				rollout.Status
				Replicas []rollout.Replica `json:"replicas"`
			}{st, replicas}
			return enc.Encode(view)
		}
		if err != nil {
			fmt.Fprintln(out, err)
		} else {
			printStatus(out, st)
		}
		printReplicas(out, replicas)
		return nil
	case "advance":
		next, err := ctl.Advance(ctx, rollout.AdvanceOptions{Actor: *actor, Reason: *reason, Override: *override, DryRun: *dryRun,
			ConfirmMySQLOnly: *confirm, Resynced: *resynced, Out: out})
		if err != nil {
			return err
		}
		if !*dryRun {
			fmt.Fprintf(out, "applied stage %q: %s on %s\n", next.Name, next.Mode, strings.Join(next.Pods, ", "))
		}
		return nil
	case "kill", "release":
		sc, err := rollout.ParseScope(*scope)
		if err != nil {
			return fmt.Errorf("--scope: %w", err)
		}
		if sc.Kind == rollout.ScopePod && env.cell.Pod(sc.Pod) == nil {
			// An unknown pod would be written and obeyed by nobody.
			fmt.Fprintf(errOut, "reservoir rollout: --scope: no pod %q in the topology (pods: %s)\n", sc.Pod, strings.Join(env.topo.PodNames(), ", "))
			return errUsage
		}
		o := rollout.KillOptions{Actor: *actor, Reason: *reason, Resynced: *resynced, DryRun: *dryRun, Out: out}
		if action == "release" {
			err = ctl.Release(ctx, sc, o)
		} else {
			err = ctl.Kill(ctx, sc, rollout.Kill(*state), o)
		}
		if err != nil {
			return err
		}
		if !*dryRun {
			fmt.Fprintf(out, "%s %s: written to the %s\n", action, sc, env.cell.FlagStore())
		}
		return nil
	case "history":
		hs, err := ctl.History(ctx, *limit)
		if err != nil {
			return err
		}
		for _, h := range hs {
			fmt.Fprintf(out, "%s  %-12s %-8s %-14s stage %-2d %s\n", h.At.Format(time.RFC3339), h.Actor, h.Action, h.Scope, h.Stage, h.Reason)
		}
		return nil
	case "auto":
		for {
			a, err := ctl.AutoStep(ctx, *actor+" (auto)")
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s auto: %s: %s\n", time.Now().UTC().Format(time.RFC3339), a.Did, a.Why)
			if *once {
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(*interval):
			}
		}
	default:
		fs.Usage()
		return errUsage
	}
}

func defaultActor() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "cli"
}

func printStatus(w io.Writer, st rollout.Status) {
	name := st.StageName
	if st.Stage < 0 {
		name = "(none applied yet)"
	}
	if st.FlagsInvalid != "" {
		fmt.Fprintf(w, "THE FLAGS DOCUMENT IS INVALID: %s\nreplicas keep the last valid flags; a kill switch still works (it writes a valid document); fix or replace the document to advance\n\n", st.FlagsInvalid)
	}
	fmt.Fprintf(w, "stage %d: %s", st.Stage, name)
	if !st.Since.IsZero() {
		fmt.Fprintf(w, " since %s", st.Since.Format(time.RFC3339))
	}
	fmt.Fprintln(w)
	for _, p := range st.Pods {
		mode := string(p.Mode)
		if mode == "" {
			mode = "(global)"
		}
		if p.Ramp != nil {
			mode += fmt.Sprintf(" + %s for %d%% of shops", p.Ramp.Mode, p.Ramp.Percent)
		}
		kill := ""
		if p.Kill.Engaged() {
			kill = fmt.Sprintf("  KILL SWITCH %s (%s, by %s)", p.Kill.State, p.Kill.Reason, p.Kill.Actor)
		}
		fmt.Fprintf(w, "  pod %-10s mode %-20s effective %s/%s%s\n", p.Pod, mode, p.Effective.Mode, p.Effective.Kill, kill)
	}
	for _, g := range st.Gates {
		verdict := "pass"
		if !g.Pass {
			verdict = "FAIL"
		}
		fmt.Fprintf(w, "  gate %-32s %s  %s\n", g.Gate, verdict, g.Why)
	}
	switch {
	case st.Next == nil:
		fmt.Fprintln(w, "next: none, the plan is complete")
	case st.Ready:
		fmt.Fprintf(w, "next: %q (%s on %s): ready to advance\n", st.Next.Name, st.Next.Mode, strings.Join(st.Next.Pods, ", "))
	default:
		fmt.Fprintf(w, "next: %q (%s on %s): blocked by the failing gates above\n", st.Next.Name, st.Next.Mode, strings.Join(st.Next.Pods, ", "))
	}
}

// orderPods prints the pods by observed traffic (dual-written calls in
// the comparer's stats), lowest first: the order a plan should list them.
func orderPods(ctx context.Context, env *operatorEnv, since time.Duration, out io.Writer) error {
	type podTraffic struct {
		pod string
		n   int64
	}
	var ps []podTraffic
	for _, p := range env.topo.PodNames() {
		t, err := env.cell.Comparer.Totals(ctx, p, time.Now().Add(-since))
		if err != nil {
			return err
		}
		ps = append(ps, podTraffic{p, t.Observations})
	}
	slices.SortStableFunc(ps, func(a, b podTraffic) int { return cmp.Compare(a.n, b.n) })
	for _, p := range ps {
		fmt.Fprintf(out, "%-12s %d observations in the last %s\n", p.pod, p.n, since)
	}
	return nil
}
