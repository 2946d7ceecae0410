package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/seed31b0e981/reservoir/internal/reconcile"
	"github.com/seed31b0e981/reservoir/internal/wire"
)

// runReconcile compares each pod's two stores, each shop against the store
// that decides it (its fences say which; there is nothing to choose), and
// with --repair fixes the other side: Redis by copy and catch-up where
// MySQL decides (what a kill switch over mysql_only asks for), MySQL's
// shadow where Redis decides. It prints each drift finding, the notes only
// when asked (a count otherwise: they are not drift), and a summary per
// pod; it fails (exit 1) while drift is left, never for notes, so
// `reservoir reconcile --repair && reservoir rollout kill ...` works.
func runReconcile(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("reconcile", "reconcile --topology FILE [--pod NAME] [--shop ID] [--repair] [--checkpoint FILE [--resume]] [--notes] [--json] [-v]", out)
	topo := topologyFlag(fs)
	pod := fs.String("pod", "", "only this pod (default: every pod)")
	shop := fs.Int64("shop", 0, "only this shop (default: every shop the pod's ledger knows)")
	repair := fs.Bool("repair", false, "fix what is found on the side that does not decide the shop (never the decider): Redis by copy and catch-up where MySQL decides, MySQL's shadow where Redis decides")
	checkpoint := fs.String("checkpoint", "", "file recording the last shop finished, per pod (the pod's name is appended)")
	resume := fs.Bool("resume", false, "start after the checkpoint")
	notes := fs.Bool("notes", false, "print the notes one per line too (empty pools, shadow holds that differ where Redis decides: not drift); -v does too")
	asJSON := fs.Bool("json", false, "print the reports as JSON (drift in findings, notes apart in notes)")
	verbose := verboseFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *shop < 0 {
		return usagef("--shop must be a positive id, got %d", *shop)
	}
	if *resume && *checkpoint == "" {
		return usagef("--resume needs --checkpoint")
	}
	env, err := openOperatorEnv(ctx, *topo, libraryLogger(*verbose, errOut))
	if err != nil {
		return err
	}
	defer env.Close()
	rc := env.cell.Reconciler
	rc.Progress = errOut
	pods := env.topo.PodNames()
	if *pod != "" {
		if _, err := env.topo.Pod(*pod); err != nil {
			return usagef("--pod: no pod %q in the topology (pods: %s)%s", *pod, strings.Join(pods, ", "), didYouMean(*pod, pods))
		}
		pods = []string{*pod}
	}
	var shops []int64
	if *shop > 0 {
		shops = []int64{*shop}
	}
	left := 0
	var reports []reconcile.Report
	for _, p := range pods {
		o := reconcile.Options{Shops: shops, Repair: *repair, Resume: *resume}
		if *checkpoint != "" {
			o.Checkpoint = *checkpoint + "." + p
		}
		rep, err := rc.Run(ctx, p, o)
		if err != nil {
			return err
		}
		reports = append(reports, rep)
		left += rep.Left
		if !*asJSON {
			printReport(out, rep, *notes || *verbose)
		}
	}
	if *asJSON {
		if err := writeJSON(out, wire.ReconcileReportsOf(reports)); err != nil {
			return err
		}
	}
	if left > 0 {
		fix := "`reservoir reconcile --repair` fixes the side that does not decide (give the same --pod and --shop)"
		if *repair {
			fix = "the repair did not fix it: the lines above say where"
		}
		return fmt.Errorf("%d drift finding(s) left: %s", left, fix)
	}
	return nil
}

// printReport prints a pod's drift one finding per line, its notes too
// when asked, and its summary.
func printReport(out io.Writer, rep reconcile.Report, notes bool) {
	for _, f := range rep.Findings {
		fmt.Fprintf(out, "%s drift: %s\n", rep.Pod, f)
	}
	if notes {
		for _, f := range rep.Notes {
			fmt.Fprintf(out, "%s note: %s\n", rep.Pod, f)
		}
	}
	hint := ""
	if len(rep.Notes) > 0 && !notes {
		hint = " (--notes lists them)"
	}
	fmt.Fprintln(out, rep.Summary()+hint)
}
