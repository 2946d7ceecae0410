package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/internal/suggest"
	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// rolloutOptions are the rollout actions' options. Each action registers
// only the ones it reads (rolloutAction.flags), so another action's flag is
// refused, never ignored.
type rolloutOptions struct {
	topology                          *string
	verbose                           bool
	plan, actor, reason, scope, state string
	from                              string
	json, dryRun, override, confirm   bool
	resynced, once, force             bool
	limit                             int
	interval, since                   time.Duration
}

// rolloutAction is one action of `reservoir rollout`: its flags and what it
// does. Every action also takes --topology and -v.
type rolloutAction struct {
	name    string
	args    string // its flags, for the usage line
	summary string // what it does, for the list of actions and its help
	flags   func(fs *flag.FlagSet, o *rolloutOptions)
	// check refuses bad usage before anything is opened.
	check func(o *rolloutOptions) error
	run   func(ctx context.Context, r *rolloutRun) error
}

// rolloutRun is what an action runs with.
type rolloutRun struct {
	action      string
	o           *rolloutOptions
	env         *operatorEnv
	out, errOut io.Writer
}

var rolloutActions = []rolloutAction{
	{
		name: "init", args: "[--from FILE] [--json]",
		summary: "write the first flags (every shop in redis mode, or a flags file's, at its version) where the topology's flags live, unless there are some",
		flags: func(fs *flag.FlagSet, o *rolloutOptions) {
			fs.StringVar(&o.from, "from", "", "copy this flags `FILE` (its flags and version) instead of writing redis everywhere: moving a fleet from a flags file to the control database")
			jsonFlag(fs, o)
		},
		run: func(_ context.Context, r *rolloutRun) error {
			v, err := initFlags(r.env, r.o.from, r.chatter())
			if err != nil || !r.o.json {
				return err
			}
			return writeJSON(r.out, v)
		},
	},
	{
		name: "status", args: "[--plan FILE] [--json]",
		summary: "the stage in force, each pod's mode and kill switch, each gate with its numbers, the live replicas",
		flags: func(fs *flag.FlagSet, o *rolloutOptions) {
			planFlag(fs, o)
			jsonFlag(fs, o)
		},
		run: rolloutStatus,
	},
	{
		name: "advance", args: "[--plan FILE] [--dry-run] [--override --reason R] [--confirm-mysql-only] [--resynced] [--actor NAME] [--json]",
		summary: "apply the next stage when the gates pass; refused while a kill switch covers its pods (--override: audited), " +
			"and, for a stage leaving mysql_only, until Redis is current",
		flags: func(fs *flag.FlagSet, o *rolloutOptions) {
			planFlag(fs, o)
			actorFlag(fs, o)
			dryRunFlag(fs, o)
			fs.BoolVar(&o.override, "override", false, "advance although gates fail or a kill switch covers the stage's pods (needs --reason; audited as an override)")
			fs.StringVar(&o.reason, "reason", "", "why, for the audit: a `REASON` (required with --override)")
			fs.BoolVar(&o.confirm, "confirm-mysql-only", false, "confirm entering a mysql_only stage (Redis leaves the request path)")
			fs.BoolVar(&o.resynced, "resynced", false, "a stage leaving mysql_only: skip the checks that Redis holds what MySQL decided (you checked it)")
			jsonFlag(fs, o)
		},
		check: func(o *rolloutOptions) error {
			if o.override && strings.TrimSpace(o.reason) == "" {
				return usagef("--override needs --reason (it is audited)")
			}
			return nil
		},
		run: rolloutAdvance,
	},
	{
		name: "kill", args: "--scope S --reason R [--state redis|redis_only] [--resynced] [--force] [--dry-run] [--actor NAME] [--json]",
		summary: "engage the kill switch (S: global, pod:NAME, shop:ID); prints the relay lag at the switch (each shop's handoff drains it into Redis); " +
			"over mysql_only it is refused while the reconciler finds drift: reconcile --pod NAME --repair",
		flags: func(fs *flag.FlagSet, o *rolloutOptions) {
			actorFlag(fs, o)
			scopeFlag(fs, o)
			fs.StringVar(&o.reason, "reason", "", "why, in words an on-call engineer understands: a `REASON` (required; kept in the flags and the audit)")
			fs.StringVar(&o.state, "state", "redis", "the switch's `STATE`: redis (MySQL keeps a shadow, compared) or redis_only (stop touching MySQL's reservation tables)")
			fs.BoolVar(&o.resynced, "resynced", false, "a scope running mysql_only: skip the check that Redis holds what MySQL decided (you checked it)")
			forceFlag(fs, o)
			dryRunFlag(fs, o)
			jsonFlag(fs, o)
		},
		check: func(o *rolloutOptions) error {
			if err := requireScopeAndReason(o); err != nil {
				return err
			}
			return oneOf("state", o.state, string(authority.KillRedis), string(authority.KillRedisOnly))
		},
		run: rolloutKill,
	},
	{
		name: "release", args: "--scope S --reason R [--force] [--dry-run] [--actor NAME] [--json]",
		summary: "turn the kill switch off (nothing to repair first: each shop's handoff copies Redis's state into MySQL)",
		flags: func(fs *flag.FlagSet, o *rolloutOptions) {
			actorFlag(fs, o)
			scopeFlag(fs, o)
			fs.StringVar(&o.reason, "reason", "", "why: a `REASON` (required; kept in the audit)")
			forceFlag(fs, o)
			dryRunFlag(fs, o)
			jsonFlag(fs, o)
		},
		check: requireScopeAndReason,
		run:   rolloutKill,
	},
	{
		name: "history", args: "[--limit N] [--json]",
		summary: "every change, newest first: who, when, why",
		flags: func(fs *flag.FlagSet, o *rolloutOptions) {
			fs.IntVar(&o.limit, "limit", 50, "how many changes")
			jsonFlag(fs, o)
		},
		check: func(o *rolloutOptions) error {
			if o.limit < 1 {
				return usagef("--limit must be at least 1, got %d", o.limit)
			}
			return nil
		},
		run: rolloutHistory,
	},
	{
		name: "auto", args: "[--plan FILE] [--interval D] [--once] [--actor NAME]",
		summary: "advance when the gates pass; kill the stage's pods when one breaks",
		flags: func(fs *flag.FlagSet, o *rolloutOptions) {
			planFlag(fs, o)
			actorFlag(fs, o)
			fs.DurationVar(&o.interval, "interval", 15*time.Second, "time between steps")
			fs.BoolVar(&o.once, "once", false, "one step, then exit")
		},
		check: func(o *rolloutOptions) error {
			if o.interval <= 0 {
				return usagef("--interval must be positive, got %s", o.interval)
			}
			return nil
		},
		run: rolloutAuto,
	},
	{
		name: "order-pods", args: "[--since D] [--json]",
		summary: "the pods ordered by the calls each served (in every mode), lowest first: the order a plan lists them in",
		flags: func(fs *flag.FlagSet, o *rolloutOptions) {
			fs.DurationVar(&o.since, "since", 24*time.Hour, "how far back to count traffic")
			jsonFlag(fs, o)
		},
		run: func(ctx context.Context, r *rolloutRun) error {
			return orderPods(ctx, r.env, r.o.since, r.o.json, r.out)
		},
	},
}

func jsonFlag(fs *flag.FlagSet, o *rolloutOptions) {
	fs.BoolVar(&o.json, "json", false, "print JSON (snake_case keys; docs/cli.md)")
}

func planFlag(fs *flag.FlagSet, o *rolloutOptions) {
	fs.StringVar(&o.plan, "plan", "", "the rollout plan `FILE` (TOML) (default: the topology's plan_file)")
}

func actorFlag(fs *flag.FlagSet, o *rolloutOptions) {
	fs.StringVar(&o.actor, "actor", "", "who is acting, for the audit: a `NAME` (default $USER, else \"cli\")")
}

func dryRunFlag(fs *flag.FlagSet, o *rolloutOptions) {
	fs.BoolVar(&o.dryRun, "dry-run", false, "print exactly what would change in the flags, change nothing")
}

func forceFlag(fs *flag.FlagSet, o *rolloutOptions) {
	fs.BoolVar(&o.force, "force", false, "with --scope shop:ID, write the switch although no pod of the topology lists the shop "+
		"(it is about to be added, or default_rule routes it); without it such a scope is refused as a likely typo")
}

func scopeFlag(fs *flag.FlagSet, o *rolloutOptions) {
	fs.StringVar(&o.scope, "scope", "", "the `SCOPE`: global, pod:NAME or shop:ID (required)")
}

func requireScopeAndReason(o *rolloutOptions) error {
	switch {
	case o.scope == "":
		return usagef("--scope is required: global, pod:NAME or shop:ID")
	case strings.TrimSpace(o.reason) == "":
		return usagef("--reason is required: why, in words an on-call engineer understands")
	}
	if _, err := flagdoc.ParseScope(o.scope); err != nil {
		return usagef("--scope: %s", strings.TrimPrefix(err.Error(), "rollout: "))
	}
	return nil
}

// newActionFlags returns a's flag set over o.
func newActionFlags(a *rolloutAction, o *rolloutOptions, help io.Writer) *flag.FlagSet {
	fs := newFlags("rollout "+a.name, "", help)
	o.topology = topologyFlag(fs)
	fs.BoolVar(&o.verbose, "v", false, verboseUsage)
	a.flags(fs, o)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: reservoir rollout %s %s [--topology FILE] [-v]\n\n%s\n", a.name, a.args, wrap(a.summary, 76))
		printFlags(w, fs)
	}
	return fs
}

// rolloutAllFlags is every action's flags in one set: where the action is
// among the arguments depends on which flags take a value.
func rolloutAllFlags() *flag.FlagSet {
	all := flag.NewFlagSet("rollout", flag.ContinueOnError)
	for i := range rolloutActions {
		newActionFlags(&rolloutActions[i], &rolloutOptions{}, io.Discard).VisitAll(func(f *flag.Flag) {
			if all.Lookup(f.Name) == nil {
				all.Var(f.Value, f.Name, f.Usage)
			}
		})
	}
	all.Bool("h", false, "help")
	all.Bool("help", false, "help")
	return all
}

// actionsTaking lists the actions that define the flag name.
func actionsTaking(name string) []string {
	var out []string
	for i := range rolloutActions {
		if newActionFlags(&rolloutActions[i], &rolloutOptions{}, io.Discard).Lookup(name) != nil {
			out = append(out, rolloutActions[i].name)
		}
	}
	return out
}

func rolloutUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: reservoir rollout ACTION [flags]   (flags before or after the action)")
	fmt.Fprintln(w, "\nactions:")
	for _, a := range rolloutActions {
		fmt.Fprintf(w, "  %-10s %s\n", a.name, a.args)
		fmt.Fprintf(w, "             %s\n", strings.ReplaceAll(wrap(a.summary, 64), "\n", "\n             "))
	}
	fmt.Fprintln(w, "\nevery action takes:")
	fmt.Fprintln(w, "  --topology FILE  the topology (default $RESERVOIR_TOPOLOGY)")
	fmt.Fprintln(w, "  -v               print the libraries' logs on stderr")
	fmt.Fprintln(w, "\nRun 'reservoir rollout ACTION -h' for an action's flags.")
}

// wrap breaks s into lines of at most width characters, at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(s) {
		switch {
		case i == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

func actionNames() []string {
	names := make([]string, len(rolloutActions))
	for i, a := range rolloutActions {
		names[i] = a.name
	}
	return names
}

// runRollout finds the action among the arguments (flags may come before
// or after it), parses the arguments with that action's flags only, and
// runs it.
func runRollout(ctx context.Context, args []string, out, errOut io.Writer) error {
	all := rolloutAllFlags()
	flags, pos, err := splitArgs(all, args)
	if err != nil {
		// The action's own flags say best what is wrong, when an argument
		// names one.
		i := slices.IndexFunc(args, func(a string) bool { return slices.Contains(actionNames(), a) })
		if i < 0 {
			return err
		}
		pos = []string{args[i]}
	}
	if len(pos) == 0 {
		if slices.ContainsFunc(flags, func(f string) bool { return f == "-h" || f == "--h" || f == "-help" || f == "--help" }) {
			rolloutUsage(out)
			return errHelp
		}
		return usagef("no action: give one of %s", strings.Join(actionNames(), ", "))
	}
	name := pos[0]
	i := slices.IndexFunc(rolloutActions, func(a rolloutAction) bool { return a.name == name })
	if i < 0 {
		return unknownAction(name, actionNames())
	}
	a := &rolloutActions[i]
	o := &rolloutOptions{}
	fs := newActionFlags(a, o, out)
	if err := parseArgs(fs, args); err != nil {
		var uf *unknownFlagError
		if errors.As(err, &uf) {
			if others := actionsTaking(uf.name); len(others) > 0 {
				err = usagef("--%s is not a flag of rollout %s (it is one of %s)", uf.name, name, strings.Join(others, ", "))
			} else if m := suggest.Closest(uf.name, flagNames(all)); uf.hint == "" && m != "" {
				err = usagef("unknown flag --%s (--%s is a flag of %s)", uf.name, m, strings.Join(actionsTaking(m), ", "))
			}
		}
		return inAction(name, err)
	}
	if rest := fs.Args()[1:]; len(rest) > 0 {
		return inAction(name, usagef("unexpected argument %q", rest[0]))
	}
	if a.check != nil {
		if err := a.check(o); err != nil {
			return inAction(name, err)
		}
	}
	if o.actor == "" {
		o.actor = defaultActor()
	}
	env, err := openOperatorEnv(ctx, *o.topology, libraryLogger(o.verbose, errOut))
	if err != nil {
		return inAction(name, err)
	}
	defer env.Close()
	err = a.run(ctx, &rolloutRun{action: name, o: o, env: env, out: out, errOut: errOut})
	if err != nil && o.json {
		// stdout holds one JSON document whatever happens once the action
		// runs: the refusal (stderr says it as without --json).
		_ = writeJSON(out, refusalOf(name, err))
	}
	return inAction(name, err)
}

// refusalOf is err, an action's refusal or failure, as --json prints it.
func refusalOf(action string, err error) wire.RolloutRefusal {
	v := wire.RolloutRefusal{Action: action, Refused: true, Error: trimContext(err.Error(), "reservoir rollout "+action),
		ExitCode: 1, Gates: []wire.GateResult{}}
	var u *usageError
	var uf *unknownFlagError
	if errors.As(err, &u) || errors.As(err, &uf) || errors.Is(err, errUsage) {
		v.ExitCode = 2
	}
	var gates *rollout.GatesError
	if errors.As(err, &gates) {
		v.Stage, v.Gates = gates.Stage, wire.GateResultsOf(gates.Gates)
	}
	return v
}

// chatter is where an action's human output goes: stdout, or stderr with
// --json (stdout then holds the JSON document alone).
func (r *rolloutRun) chatter() io.Writer {
	if r.o.json {
		return r.errOut
	}
	return r.out
}

// flagsVersion is the version of the flags in the store now (0 when there
// are none, or they cannot be read).
func (r *rolloutRun) flagsVersion() int64 {
	f, err := r.env.cell.FlagStore().Read()
	if err != nil {
		return 0
	}
	return f.Version
}

// changeOut is the Out of a change for --json: what the controller prints
// (the dry-run diff, the relay lag, the fleet's obedience) is collected,
// then sorted into the document's fields by finish.
type changeOut struct {
	bytes.Buffer
	fleet rollout.Obedience
}

// plusVersion finds the version a dry-run diff's document after would
// carry (its added "version" keys).
var plusVersion = regexp.MustCompile(`(?m)^\+.*"version"\s*:\s*([0-9]{1,16})`)

// finish fills v's versions, diff, relay lag, obedience and warnings from
// what the change printed, and echoes it to stderr.
func (c *changeOut) finish(r *rolloutRun, v *wire.RolloutChange, before int64, warn string) {
	printed := c.String()
	io.WriteString(r.errOut, printed)
	v.FlagsVersionBefore = before
	v.Warnings = []string{}
	if v.DryRun {
		if i := strings.Index(printed, "--- "); i >= 0 && (i == 0 || printed[i-1] == '\n') {
			printed, v.Diff = printed[:i], printed[i:]
		}
		v.FlagsVersionAfter = before + 1
		for _, m := range plusVersion.FindAllStringSubmatch(v.Diff, -1) {
			if n, err := strconv.ParseInt(m[1], 10, 64); err == nil && n > before {
				v.FlagsVersionAfter = n
			}
		}
	} else {
		v.FlagsVersionAfter = r.flagsVersion()
		if c.fleet.Version != 0 {
			o := wire.ObedienceOf(c.fleet)
			v.Obeyed = &o
			v.FlagsVersionAfter = c.fleet.Version
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(printed), "\n") {
		switch lag, isLag := strings.CutPrefix(line, "relay lag at the switch: "); {
		case line == "", v.Obeyed != nil && line == v.Obeyed.Summary:
		case isLag:
			v.RelayLag = lag
		default:
			v.Warnings = append(v.Warnings, line)
		}
	}
	if warn != "" {
		v.Warnings = append(v.Warnings, warn)
	}
}

// controller opens the rollout controller on the cell's control database
// (opened from the topology with its secrets and TLS settings). withPlan
// loads the plan (--plan, else the topology's plan_file): status, advance
// and auto need one (rollout.ErrNoPlan says so); the kill switch and the
// history work without, so a broken plan file never stands in their way.
func (r *rolloutRun) controller(withPlan bool) (*rollout.Controller, error) {
	var plan *rollout.Plan
	path := cmp.Or(r.o.plan, r.env.topo.PlanFile)
	if withPlan && path != "" {
		var err error
		if plan, err = loadPlan(path, r.env.topoPath, r.env.topo); err != nil {
			return nil, err
		}
	}
	return r.newController(plan)
}

func (r *rolloutRun) newController(plan *rollout.Plan) (*rollout.Controller, error) {
	return rollout.NewController(rollout.ControllerConfig{DB: r.env.cell.Control, Flags: r.env.cell.FlagStore(), Plan: plan, Pods: r.env.topo.PodNames(),
		Stats: r.env.cell.Comparer, Reconciler: r.env.cell.Reconciler, Lag: r.env.cell, Handoffs: r.env.cell, Stores: r.env.cell, Modes: r.env.cell.Modes()})
}

// switchController is the controller of the kill switch: with the
// topology's plan when it loads, as a replica's admin API has it, so a
// release that covers the pods of the stage in force starts the stage's
// gates again here as it does there (rollout.Controller.Release). A plan
// that does not load never stands in the switch's way: the controller
// goes without, and warn says what that leaves undone.
func (r *rolloutRun) switchController() (ctl *rollout.Controller, warn string, err error) {
	if path := r.env.topo.PlanFile; path != "" {
		plan, perr := rollout.LoadPlan(path)
		if perr == nil {
			if ctl, perr = r.newController(plan); perr == nil {
				return ctl, "", nil
			}
		}
		warn = fmt.Sprintf("the plan did not load (%v): the gates of the stage in force were not started again; "+
			"fix the plan, then release again to start them", strings.TrimPrefix(perr.Error(), "rollout: "))
	}
	ctl, err = r.newController(nil)
	return ctl, warn, err
}

func rolloutStatus(ctx context.Context, r *rolloutRun) error {
	ctl, err := r.controller(true)
	if err != nil {
		return err
	}
	st, err := ctl.Status(ctx)
	if err != nil && !errors.Is(err, rollout.ErrNoPlan) {
		return err
	}
	replicas, rerr := rollout.Replicas(ctx, r.env.cell.Control)
	if rerr != nil {
		return rerr
	}
	if r.o.json {
		v := wire.ControllerStatus{PlanStatus: wire.PlanStatusOf(st, time.Now()), Replicas: wire.ReplicasOf(replicas)}
		if err != nil {
			v.Error = strings.TrimPrefix(err.Error(), "rollout: ")
		}
		return writeJSON(r.out, v)
	}
	if from := r.env.cell.ModesFrom(); from != "" {
		fmt.Fprintf(r.out, "modes: served by %s (reservoir does not write them); kill switch: reservoir's own, in the control database, winning over them; "+
			"each replica's version below is the epoch: the source's version x 2^20 + the kill switch document's\n", from)
	}
	if err != nil {
		fmt.Fprintln(r.out, strings.TrimPrefix(err.Error(), "rollout: "))
	} else {
		printStatus(r.out, st, time.Now())
	}
	printReplicas(r.out, replicas)
	return nil
}

func rolloutAdvance(ctx context.Context, r *rolloutRun) error {
	ctl, err := r.controller(true)
	if err != nil {
		return err
	}
	o := r.o
	var (
		out    io.Writer = r.out
		co     changeOut
		before int64
		stage  = -1
	)
	if o.json {
		out = &co
		before = r.flagsVersion()
		if st, err := ctl.Status(ctx); err == nil {
			stage = st.Stage
		}
	}
	next, err := ctl.Advance(ctx, rollout.AdvanceOptions{Actor: o.actor, Reason: o.reason, Override: o.override, DryRun: o.dryRun,
		ConfirmMySQLOnly: o.confirm, Resynced: o.resynced, Out: out, Fleet: &co.fleet})
	var gates *rollout.GatesError
	if errors.As(err, &gates) {
		return gateRefusal{gates}
	}
	if err != nil {
		return err
	}
	if !o.dryRun {
		fmt.Fprintf(r.chatter(), "applied stage %q: %s on %s\n", next.Name, next.Mode, strings.Join(next.Pods, ", "))
	}
	if !o.json {
		return nil
	}
	action := "advance"
	if o.override {
		action = "override"
	}
	ws := wire.StageOf(stage+1, next, stage)
	if !o.dryRun {
		ws = wire.StageOf(stage+1, next, stage+1)
	}
	v := wire.RolloutChange{Action: action, Scope: strings.Join(next.Pods, ","), State: string(next.Mode), Stage: &ws,
		Actor: o.actor, Reason: o.reason, DryRun: o.dryRun}
	co.finish(r, &v, before, "")
	return writeJSON(r.out, v)
}

// gateRefusal prints an advance refused by its gates as a list, one
// failing gate a line, and what to do next.
type gateRefusal struct{ *rollout.GatesError }

func (g gateRefusal) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "refused: the gates of stage %q do not all pass (%s):\n", g.Stage, rollout.CountVerdicts(g.Gates))
	for _, r := range g.Gates {
		if r.Pass {
			continue
		}
		why := r.Why
		if _, class, ok := strings.Cut(r.Gate, ":"); ok {
			why = strings.TrimPrefix(why, class+": ") // "max_rate:shadow_missing" says the class already
		} else if _, n, ok := strings.Cut(why, ": "); ok && r.Gate == "max_shadow_error_rate" {
			why = n // and this one what it counts
		}
		fmt.Fprintf(&b, "  %-32s %-8s  %s\n", r.Gate, r.Verdict(), why)
	}
	b.WriteString("`reservoir rollout status` shows every gate; `reservoir rollout advance --override --reason R` advances anyway (audited)")
	return b.String()
}

func (g gateRefusal) Unwrap() error { return g.GatesError }

func rolloutKill(ctx context.Context, r *rolloutRun) error {
	o := r.o
	sc, err := flagdoc.ParseScope(o.scope) // checked already
	if err != nil {
		return usagef("--scope: %v", err)
	}
	if sc.Kind == flagdoc.ScopePod && r.env.cell.Pod(sc.Pod) == nil {
		// An unknown pod would be written and obeyed by nobody.
		return usagef("--scope: no pod %q in the topology (pods: %s)", sc.Pod, strings.Join(r.env.topo.PodNames(), ", "))
	}
	if sc.Kind == flagdoc.ScopeShop && !o.force {
		// A shop no pod lists is most likely a typo, and a switch on it
		// protects nothing: refused unless --force says the shop is
		// about to be added (or default_rule serves it). A release of a
		// shop the flags name (one forced before) is let through.
		if err := r.env.topo.UnlistedShop(sc.Shop); err != nil && !(r.action == "release" && flagsName(r.env, sc.Shop)) {
			return usagef("--scope %s: %v. Give --force if the shop is about to be added, or is served by the default rule", sc, err)
		}
	}
	ctl, warn, err := r.switchController()
	if err != nil {
		return err
	}
	var (
		out    io.Writer = r.out
		co     changeOut
		before int64
	)
	if o.json {
		out, before = &co, r.flagsVersion()
	}
	ko := rollout.KillOptions{Actor: o.actor, Reason: o.reason, Resynced: o.resynced, DryRun: o.dryRun, Out: out, Fleet: &co.fleet}
	state := string(authority.KillOff)
	if r.action == "release" {
		err = ctl.Release(ctx, sc, ko)
	} else {
		state = o.state
		err = ctl.Kill(ctx, sc, authority.Kill(o.state), ko)
	}
	if err != nil {
		return err
	}
	if !(warn != "" && r.action == "release" && sc.Kind != flagdoc.ScopeShop) {
		warn = ""
	}
	if !o.dryRun {
		fmt.Fprintf(r.chatter(), "%s %s: written to the %s\n", r.action, sc, r.env.cell.FlagStore())
		if warn != "" {
			fmt.Fprintf(r.errOut, "warning: %s\n", warn)
		}
	}
	if !o.json {
		return nil
	}
	if o.dryRun {
		warn = ""
	}
	v := wire.RolloutChange{Action: r.action, Scope: sc.String(), State: state, Actor: o.actor, Reason: o.reason, DryRun: o.dryRun}
	co.finish(r, &v, before, warn)
	return writeJSON(r.out, v)
}

// flagsName reports whether the flags hold a setting of shop (a mode or a
// kill switch of its own).
func flagsName(env *operatorEnv, shop int64) bool {
	f, err := env.cell.FlagStore().Read()
	if err != nil {
		return false
	}
	_, ok := f.Shops[shop]
	return ok
}

func rolloutHistory(ctx context.Context, r *rolloutRun) error {
	ctl, err := r.controller(false)
	if err != nil {
		return err
	}
	hs, err := ctl.History(ctx, r.o.limit)
	if err != nil {
		return err
	}
	if r.o.json {
		return writeJSON(r.out, wire.AuditEntriesOf(hs)) // [] when empty
	}
	if len(hs) == 0 {
		fmt.Fprintln(r.out, "no changes recorded yet: every advance, kill and release made through reservoir is listed here (who, when, why)")
		return nil
	}
	for _, h := range hs {
		fmt.Fprintf(r.out, "%s  %-12s %-8s %-14s stage %-2d %s\n", h.At.Format(time.RFC3339), h.Actor, h.Action, h.Scope, h.Stage, h.Reason)
	}
	return nil
}

func rolloutAuto(ctx context.Context, r *rolloutRun) error {
	ctl, err := r.controller(true)
	if err != nil {
		return err
	}
	for {
		a, err := ctl.AutoStep(ctx, r.o.actor+" (auto)")
		if err != nil {
			return err
		}
		fmt.Fprintf(r.out, "%s auto: %s: %s\n", time.Now().UTC().Format(time.RFC3339), a.Did, a.Why)
		if r.o.once {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.o.interval):
		}
	}
}

// writeJSON writes v, a type of package wire, indented, as every --json
// output is.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func defaultActor() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "cli"
}

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
// the kill switch off, at version 1: every source refuses a document
// without a version) where the topology's flags live, unless there is
// one: replicas that find none serve nothing (they cannot tell which store
// decides).
//
// With from, the flags file's flags are copied at their version: the
// stores remember the version of each shop's last handoff and treat older
// flags as stale, so a fleet moved mid-rollout from a file to the database
// must keep counting from the file's version.
func initFlags(env *operatorEnv, from string, out io.Writer) (wire.FlagsInit, error) {
	store := env.cell.FlagStore()
	v := wire.FlagsInit{Store: store.String()}
	cur, err := store.Read()
	switch {
	case err == nil:
		fmt.Fprintf(out, "the %s already holds flags (version %d); nothing written\n", store, cur.Version)
		v.FlagsVersion = cur.Version
		return v, nil
	case !errors.Is(err, fs.ErrNotExist):
		return v, err
	}
	first, what := flagdoc.NewFlags(), "every shop in redis mode, kill switch off, at version 1"
	if from != "" {
		if first, err = (flagdoc.FlagsFile{Path: from}).Read(); err != nil {
			return v, fmt.Errorf("--from: %w", err)
		}
		what = fmt.Sprintf("copied from %s at version %d", from, first.Version)
	}
	if err := store.Write(first); err != nil {
		return v, err
	}
	fmt.Fprintf(out, "wrote the first flags to the %s: %s\n", store, what)
	v.Written, v.FlagsVersion, v.From = true, first.Version, from
	return v, nil
}

// printStatus prints st as of now: under each pod's flags, what its
// fences say (the pod's handoff report judged against the flags' version).
func printStatus(w io.Writer, st rollout.Status, now time.Time) {
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
	if !st.CountingFrom.IsZero() {
		// The gates count from the comparer's first whole window after
		// the stage was applied (or started again by a release).
		fmt.Fprintf(w, ", gates counting from %s UTC", st.CountingFrom.UTC().Format(time.TimeOnly))
		if ahead := st.CountingFrom.Sub(now); ahead > 0 {
			fmt.Fprintf(w, " (in %s)", ahead.Round(time.Second))
		}
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
		_, fences, _ := st.Fences(p, now)
		fmt.Fprintf(w, "    fences: %s\n", fences)
	}
	for _, g := range st.Gates {
		fmt.Fprintf(w, "  gate %-32s %-8s  %s\n", g.Gate, g.Verdict(), g.Why)
	}
	switch {
	case st.Next == nil:
		fmt.Fprintln(w, "next: none, the plan is complete")
	case st.Ready:
		fmt.Fprintf(w, "next: %q (%s on %s): ready to advance\n", st.Next.Name, st.Next.Mode, strings.Join(st.Next.Pods, ", "))
	default:
		fmt.Fprintf(w, "next: %q (%s on %s): blocked until every gate above passes\n", st.Next.Name, st.Next.Mode, strings.Join(st.Next.Pods, ", "))
	}
}
