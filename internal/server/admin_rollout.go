package server

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/seed31b0e981/reservoir/rollout"
)

func (s *Server) rolloutStatus(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := s.cfg.Cell
	v := RolloutView{FlagsFile: c.Topology.FlagsFile, FlagsLoaded: c.Flags.Loaded(), At: time.Now().UTC(), Pods: []PodView{}, Shops: []ShopView{}}
	v.FlagsRejected = rejectedView(c.Flags)
	flags, err := c.FlagStore().Read()
	if err != nil {
		v.FlagsError = err.Error()
		flags = rollout.NewFlags()
	}
	v.GlobalMode, v.GlobalKill = flags.Mode, killView(flags.Kill)
	for _, tp := range c.Topology.Pods {
		pf := flags.Pods[tp.Name]
		d := flags.Resolve(tp.Name, 0)
		rt := d.Route()
		v.Pods = append(v.Pods, PodView{
			Pod: tp.Name, Mode: pf.Mode, Ramp: pf.Ramp, Kill: killView(pf.Kill),
			File:      DecisionView{Mode: d.Mode, Kill: d.Kill, Authority: string(rt.Authority), Effective: rt.Effective},
			Effective: s.decide(ctx, tp.Name, 0),
			Shops:     append([]int64{}, tp.Shops...),
			RelayLag:  s.podLag(ctx, c.Pod(tp.Name)),
		})
	}
	shops := make([]int64, 0, len(flags.Shops))
	for id := range flags.Shops {
		shops = append(shops, id)
	}
	slices.Sort(shops)
	for _, id := range shops {
		sf := flags.Shops[id]
		sv := ShopView{Shop: id, Mode: sf.Mode, Kill: killView(sf.Kill)}
		if pod, err := c.PodOf(id); err == nil && pod != nil {
			sv.Pod = pod.Name
			sv.Effective = s.decide(ctx, pod.Name, id)
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
		v.Plan = &st
	}
	if rs, err := rollout.Replicas(ctx, c.Control); err == nil {
		v.Replicas = rs
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
	if h == nil {
		h = []rollout.AuditEntry{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": h})
}
