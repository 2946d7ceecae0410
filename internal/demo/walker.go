package demo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// walker prints progress and walks the rollout up to walkTo, through the
// controller: it advances only when the stage's gates pass, exactly as
// `reservoir rollout advance` would (no reconcile first: each shop's
// handoff copies Redis's state into MySQL as MySQL takes over).
type walker struct {
	ctl   *rollout.Controller
	c     *cell.Cell
	p     *printer
	plan  *rollout.Plan
	since time.Time
	// series reads the server's last series points (server.Server.Series):
	// the progress lines show the dashboard's rates, over its window.
	series func(points int) wire.Series
	// program names the reservoir binary in the commands printed
	// (Config.Program).
	program string
	// inc is the tour's incident (nil with Config.SkipIncident): it takes
	// over once the walk reached walkTo.
	inc *incident

	lastReq   int64
	lastAt    time.Time
	refusals  int
	announced bool
}

// loop runs until ctx ends: a rollout step every 2 seconds, a progress
// line every progress.
func (w *walker) loop(ctx context.Context, gen *traffic, progress time.Duration) {
	step := time.NewTicker(2 * time.Second)
	defer step.Stop()
	show := time.NewTicker(progress)
	defer show.Stop()
	w.lastAt = time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-step.C:
			w.step(ctx)
		case <-show.C:
			w.progress(ctx, gen)
		}
	}
}

func (w *walker) step(ctx context.Context) {
	st, err := w.ctl.Status(ctx)
	if err != nil {
		return
	}
	if st.Stage >= walkTo {
		if w.inc != nil {
			w.inc.step(ctx, st)
		}
		return
	}
	if !st.Ready {
		return
	}
	next, err := w.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "demo", Reason: "demo: the stage's gates pass"})
	switch {
	case err == nil:
		w.p.say("rollout: the gates of %q pass (%d observations, every ceiling held): applied %q", st.StageName, st.Evidence.Observations, next.Name)
		if next.Mode == authority.ModeMySQL {
			w.p.say("rollout: MySQL now decides for %s, shop by shop on each shop's next call; Redis follows through the relay "+
				"(the relay lag is on the dashboard next to the kill switch), so the kill switch is lossless. Try it.",
				strings.Join(next.Pods, ", "))
		}
	case errors.Is(err, rollout.ErrGatesFail):
		// A gate broke between the status and the advance: the next step tells.
	default:
		// The control database or the flags file did not answer: the next
		// step tries again.
		w.refusals++
		if w.refusals == 1 || w.refusals%10 == 0 {
			w.p.say("rollout: %v (will retry)", err)
		}
	}
}

func (w *walker) progress(ctx context.Context, gen *traffic) {
	now := time.Now()
	req := gen.requests.Load()
	rps := float64(req-w.lastReq) / now.Sub(w.lastAt).Seconds()
	w.lastReq, w.lastAt = req, now
	var b strings.Builder
	fmt.Fprintf(&b, "[%5s] %3.0f req/s, %d reserved (%d insufficient), %d claimed, %d released, %d failed |",
		now.Sub(w.since).Round(time.Second), rps, gen.reserved.Load(), gen.insufficient.Load(), gen.claimed.Load(), gen.released.Load(), gen.failed.Load())
	var ser wire.Series
	if w.series != nil {
		ser = w.series(1)
	}
	for _, p := range w.c.Pods() {
		d, _ := w.c.Flags.Decide(ctx, p.Name, 0)
		rt := d.Route()
		fmt.Fprintf(&b, " %s %s", p.Name, rt.Effective)
		if d.Kill != authority.KillOff {
			fmt.Fprintf(&b, " (KILL %s)", d.Kill)
		}
		if rt.Authority == reservation.AuthorityMySQL {
			// What a kill switch now would drain into Redis first.
			l := p.Mirror.LastLag()
			fmt.Fprintf(&b, " [relay lag %d, oldest %s]", l.Changes, l.Oldest.Round(time.Millisecond))
		}
		if rt.Shadow && w.series != nil {
			fmt.Fprintf(&b, " [%s]", compared(ser, p.Name))
		}
		b.WriteString(";")
	}
	if st, err := w.ctl.Status(ctx); err == nil {
		switch {
		case st.Next == nil:
			fmt.Fprintf(&b, " | stage %q, the last", st.StageName)
		case st.Ready:
			fmt.Fprintf(&b, " | stage %q: gates pass for %q", st.StageName, st.Next.Name)
		default:
			fmt.Fprintf(&b, " | stage %q, next %q waits on: %s", st.StageName, st.Next.Name, waiting(st.Gates))
		}
		if st.Stage >= walkTo && !w.announced && (w.inc == nil || w.inc.done()) {
			w.announced = true
			defer w.p.say("the demo walked as far as it goes by itself; the next stages are yours: `%s rollout --topology %s/topology.toml advance`", w.program, dirOf(w.c))
		}
	}
	w.p.say("%s", b.String())
}

// compared says a pod's compared calls and mismatch rate as the
// dashboard's pods table does (compared/s, mismatch), from the same
// series point, over the same window, which it names: "12.0 compared/s,
// mismatch 2.50%, last 10 s". The mismatch classes are compare's
// (outcome, allocation, shadow missing), the page's too.
func compared(ser wire.Series, pod string) string {
	window := fmt.Sprintf("last %s s", strconv.FormatFloat(float64(ser.WindowMs)/1000, 'f', -1, 64))
	pts := ser.Pods[pod]
	if len(pts) == 0 || pts[len(pts)-1].ObservationsPerSec <= 0 {
		return "nothing compared, " + window
	}
	pt := pts[len(pts)-1]
	mismatch := 0.0
	for c, r := range pt.ClassRates {
		if compare.Class(c).Mismatch() {
			mismatch += r
		}
	}
	return fmt.Sprintf("%s compared/s, mismatch %s, %s", rate(pt.ObservationsPerSec), pct(mismatch), window)
}

// rate and pct print a number as the dashboard does (app.js's rate and
// pct), so that the console and the page read alike.
func rate(x float64) string {
	if x < 10 {
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'f', 0, 64)
}

func pct(x float64) string {
	switch {
	case x == 0:
		return "0%"
	case x < 0.0001:
		return "<0.01%"
	case x < 0.01:
		return strconv.FormatFloat(100*x, 'f', 2, 64) + "%"
	}
	return strconv.FormatFloat(100*x, 'f', 1, 64) + "%"
}

// waiting names the gates that do not pass yet, briefly.
func waiting(gs []rollout.GateResult) string {
	var parts []string
	for _, g := range gs {
		if g.Pass {
			continue
		}
		switch g.Gate {
		case "min_observations":
			parts = append(parts, fmt.Sprintf("observations %.0f/%.0f", g.Value, g.Limit))
		case "min_duration":
			parts = append(parts, fmt.Sprintf("time %.0fs/%.0fs", g.Value, g.Limit))
		default:
			// A ceiling within its limit fails only for want of data,
			// which min_observations already says.
			if g.Breaking {
				parts = append(parts, fmt.Sprintf("%s %.4f > %.4f", g.Gate, g.Value, g.Limit))
			}
		}
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

func dirOf(c *cell.Cell) string {
	f := c.Topology.FlagsFile
	if i := strings.LastIndexByte(f, '/'); i > 0 {
		return f[:i]
	}
	return "."
}
