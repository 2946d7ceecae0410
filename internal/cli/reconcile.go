package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/seed31b0e981/reservoir/internal/reconcile"
)

// runReconcile compares each pod's two stores, each shop against the store
// that decides it (its fences say which; there is nothing to choose), and
// with --repair fixes the other side: Redis by copy and catch-up where
// MySQL decides (what a kill switch over mysql_only asks for), MySQL's
// shadow where Redis decides.
func runReconcile(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("reconcile", "reconcile --topology FILE [--pod NAME] [--shop ID] [--repair] [--checkpoint FILE [--resume]] [--json] [-v]", out)
	topo := topologyFlag(fs)
	pod := fs.String("pod", "", "only this pod (default: every pod)")
	shop := fs.Int64("shop", 0, "only this shop (default: every shop the pod's ledger knows)")
	repair := fs.Bool("repair", false, "fix what is found on the side that does not decide the shop (never the decider): Redis by copy and catch-up where MySQL decides, MySQL's shadow where Redis decides")
	checkpoint := fs.String("checkpoint", "", "file recording the last shop finished, per pod (the pod's name is appended)")
	resume := fs.Bool("resume", false, "start after the checkpoint")
	asJSON := fs.Bool("json", false, "print the reports as JSON")
	verbose := verboseFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *shop < 0 {
		return fmt.Errorf("--shop must be a positive id, got %d", *shop)
	}
	if *resume && *checkpoint == "" {
		return fmt.Errorf("--resume needs --checkpoint")
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
			return err
		}
		pods = []string{*pod}
	}
	var shops []int64
	if *shop > 0 {
		shops = []int64{*shop}
	}
	drift := 0
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
		for _, f := range rep.Findings {
			if !f.Repaired && !f.Note {
				drift++
			}
		}
		if !*asJSON {
			for _, f := range rep.Findings {
				state := ""
				if f.Repaired {
					state = " (repaired)"
				}
				fmt.Fprintf(out, "%s %s: %s%s\n", p, f.Side, f.Detail, state)
			}
			fmt.Fprintln(out, rep.Summary())
		}
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(reports); err != nil {
			return err
		}
	}
	if drift > 0 {
		return fmt.Errorf("%d finding(s) left", drift)
	}
	return nil
}
