package server

import (
	"net/http"
	"time"

	"github.com/seed31b0e981/reservoir/internal/wire"
)

func (s *Server) diffs(w http.ResponseWriter, r *http.Request) {
	pod, p := s.podParam(r, false)
	if p == nil {
		var limit int
		if limit, p = intParam(r, "limit", 20, 1, 1000); p == nil {
			ds, err := s.cfg.Cell.Comparer.RecentDiffs(r.Context(), pod, limit)
			if err != nil {
				s.internal(w, r, "read diff records", err)
				return
			}
			writeJSON(w, http.StatusOK, wire.Diffs{Pod: pod, Diffs: wire.DiffRecordsOf(ds)})
			return
		}
	}
	writeProblem(w, r, *p)
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	pod, p := s.podParam(r, false)
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	since, p := sinceParam(r, time.Now())
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	t, err := s.cfg.Cell.Comparer.Totals(r.Context(), pod, since)
	if err != nil {
		s.internal(w, r, "read compare stats", err)
		return
	}
	writeJSON(w, http.StatusOK, wire.StatsOf(t))
}

// Series returns the last points of every pod's series, as GET
// /admin/series?points=N answers them: this replica's rates over the
// trailing Config.SeriesWindow, what the dashboard's pods table shows.
// The demo's progress lines read it, so that the console and the
// dashboard show the same window.
func (s *Server) Series(points int) wire.Series {
	return s.sampler.series(s.cfg.Cell.Topology.PodNames(), min(max(points, 1), maxSamples))
}

func (s *Server) series(w http.ResponseWriter, r *http.Request) {
	pod, p := s.podParam(r, false)
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	points, p := intParam(r, "points", 60, 1, maxSamples)
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	pods := s.cfg.Cell.Topology.PodNames()
	if pod != "" {
		pods = []string{pod}
	}
	writeJSON(w, http.StatusOK, s.sampler.series(pods, points))
}
