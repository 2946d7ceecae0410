package server

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

func (s *Server) rolloutStatus(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := s.cfg.Cell
	v := wire.RolloutStatus{FlagsFile: c.Topology.FlagsFile, FlagsLoaded: c.Flags.Loaded(), At: time.Now().UTC(), Pods: []wire.Pod{}, Shops: []wire.Shop{},
		Stages: []wire.Stage{}, Replicas: []wire.Replica{}}
	v.FlagsRejected = rejected(c.Flags)
	v.ModesFrom = c.ModesFrom()
	flags, err := c.FlagStore().Read()
	if err != nil {
		v.FlagsError = err.Error()
		flags = flagdoc.NewFlags()
	}
	v.GlobalMode, v.GlobalKill = string(flags.Mode), wire.KillOf(flags.Kill)
	podHandoffs := map[string]handoffs{}
	for _, tp := range c.Topology.Pods {
		pf := flags.Pods[tp.Name]
		pv := wire.Pod{
			Pod: tp.Name, Mode: string(pf.Mode), Ramp: wire.RampOf(pf.Ramp), Kill: wire.KillOf(pf.Kill),
			File:      fileDecision(flags, tp.Name, 0),
			Effective: s.decide(ctx, tp.Name, 0),
			Shops:     append([]int64{}, tp.Shops...),
			RelayLag:  s.podLag(ctx, c.Pod(tp.Name)),
		}
		h := s.podHandoffs(ctx, tp.Name, cmp.Or(pv.Effective.Version, pv.File.Version))
		pv.Handoffs, podHandoffs[tp.Name] = h.view, h
		k := pv.Kill
		if !k.Engaged() {
			k = v.GlobalKill
		}
		pv.State = stateOf(pv.Effective, fileOr(v.FlagsError, pv.File, pv.Effective), k, pf.Ramp, h)
		v.Pods = append(v.Pods, pv)
	}
	// Every shop the topology routes, and every shop with flags of its
	// own: a shop without flags still has a state worth seeing (and a
	// kill switch to engage).
	var shops []int64
	for _, tp := range c.Topology.Pods {
		shops = append(shops, tp.Shops...)
	}
	for id := range flags.Shops {
		shops = append(shops, id)
	}
	slices.Sort(shops)
	for _, id := range slices.Compact(shops) {
		sf, own := flags.Shops[id]
		sv := wire.Shop{Shop: id, OwnFlags: own, Mode: string(sf.Mode), Kill: wire.KillOf(sf.Kill)}
		if pod, err := c.PodOf(id); err == nil && pod != nil {
			sv.Pod = pod.Name
			sv.Effective = s.decide(ctx, pod.Name, id)
			k := sv.Kill
			if !k.Engaged() {
				k = wire.KillOf(flags.Pods[pod.Name].Kill)
			}
			if !k.Engaged() {
				k = v.GlobalKill
			}
			sv.State = stateOf(sv.Effective, fileOr(v.FlagsError, fileDecision(flags, pod.Name, id), sv.Effective), k, nil, podHandoffs[pod.Name])
		}
		v.Shops = append(v.Shops, sv)
	}
	switch st, err := s.cfg.Controller.Status(ctx); {
	case errors.Is(err, rollout.ErrNoPlan):
		v.PlanMessage = "no rollout plan is configured (the topology's plan_file): stages and gates are not available"
	case err != nil:
		s.log.Error("server: rollout status failed", "request_id", RequestID(ctx), "err", err)
		v.PlanMessage = "rollout status failed (" + failureClass(err) + "); the server's log has the error"
	default:
		plan := wire.PlanStatusOf(st, time.Now())
		v.Plan = &plan
		v.Stages = wire.StagesOf(s.cfg.Controller.Plan(), st.Stage)
	}
	if rs, err := rollout.Replicas(ctx, c.Control); err == nil {
		v.Replicas = wire.ReplicasOf(rs)
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) rolloutHistory(w http.ResponseWriter, r *http.Request) {
	limit, p := intParam(r, "limit", 20, 1, 500)
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	h, err := s.cfg.Controller.History(r.Context(), limit)
	if err != nil {
		s.internal(w, r, "rollout history", err)
		return
	}
	writeJSON(w, http.StatusOK, wire.History{Entries: wire.AuditEntriesOf(h)})
}

// fileDecision is what the flags file resolves to for a shop of pod.
func fileDecision(flags *flagdoc.Flags, pod string, shop int64) wire.Decision {
	return wire.DecisionOf(flags.Resolve(pod, shop))
}

// podHandoffs reads the pod's handoff report (within a second: a pod
// whose MySQL does not answer must not hold the status back) and judges
// it against the flags at version.
func (s *Server) podHandoffs(ctx context.Context, pod string, version int64) handoffs {
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	p, ok, err := s.cfg.Cell.Handoffs(hctx, pod)
	if err != nil {
		s.log.Warn("server: handoff report not read", "pod", pod, "err", err)
	}
	return judgeHandoffs(p, ok, err, version, time.Now())
}

// fileOr is file, or eff when the flags document cannot be read
// (flagsError): then nothing is propagating; the banner says what is
// wrong, and the replica keeps its last valid flags.
func fileOr(flagsError string, file, eff wire.Decision) wire.Decision {
	if flagsError != "" {
		return eff
	}
	return file
}
