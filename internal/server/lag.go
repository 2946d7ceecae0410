package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// lagFresh is how old the relay's own measurement (every replica's
// mirror measures about once a second) may be before the admin API
// measures again.
const lagFresh = 2 * time.Second

// podLag is the pod's relay lag: the mirror's last measurement when it is
// recent, else a new one (within a second).
func (s *Server) podLag(ctx context.Context, p *cell.Pod) wire.RelayLag {
	l := p.Mirror.LastLag()
	if l.At.IsZero() || time.Since(l.At) > lagFresh {
		mctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var err error
		if l, err = p.Mirror.Lag(mctx); err != nil {
			s.log.Warn("server: relay lag not measured", "pod", p.Name, "err", err)
			return wire.RelayLag{Error: "unknown: " + err.Error()}
		}
	}
	return wire.RelayLag{Changes: l.Changes, OldestMs: float64(l.Oldest.Microseconds()) / 1000, At: l.At.UTC()}
}

// lagText measures the relay lag of pods now and says it the way the
// rollout controller records it in the audit ("pod-a 12 change(s), oldest
// 40ms; pod-b 0 change(s), oldest 0s"), for a kill switch written without
// a controller (or by one without a LagReader).
func (s *Server) lagText(ctx context.Context, pods []string) string {
	var parts []string
	for _, name := range pods {
		p := s.cfg.Cell.Pod(name)
		if p == nil {
			continue
		}
		mctx, cancel := context.WithTimeout(ctx, time.Second)
		l, err := p.Mirror.Lag(mctx)
		cancel()
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s unknown (%v)", name, err))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d change(s), oldest %s", name, l.Changes, l.Oldest.Round(time.Millisecond)))
	}
	return strings.Join(parts, "; ")
}

// lagLinePrefix starts the line rollout.Controller.Kill writes to its
// KillOptions.Out.
const lagLinePrefix = "relay lag at the switch: "

// lagFromOutput picks the relay lag out of what the controller's Kill
// wrote ("" when it wrote none: it has no LagReader, or it refused before
// switching).
func lagFromOutput(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, lagLinePrefix); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// podsUnder lists the topology's pods within scope (a shop scope: the
// shop's pod).
func (s *Server) podsUnder(scope flagdoc.Scope) []string {
	var out []string
	for _, name := range s.cfg.Cell.Topology.PodNames() {
		switch scope.Kind {
		case flagdoc.ScopePod:
			if scope.Pod != name {
				continue
			}
		case flagdoc.ScopeShop:
			if pod, _ := s.representative(scope); pod != name {
				continue
			}
		}
		out = append(out, name)
	}
	return out
}
