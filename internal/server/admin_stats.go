package server

import (
	"net/http"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
)

// DiffsResponse is the answer of GET /admin/diffs.
type DiffsResponse struct {
	// Pod is the pod asked for ("" for every pod).
	Pod string `json:"pod"`
	// Diffs are the records, newest first.
	Diffs []compare.DiffRecord `json:"diffs"`
}

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
			if ds == nil {
				ds = []compare.DiffRecord{}
			}
			writeJSON(w, http.StatusOK, DiffsResponse{Pod: pod, Diffs: ds})
			return
		}
	}
	writeProblem(w, r, *p)
}

// StatsResponse is the answer of GET /admin/stats: the comparer's stats
// summed over every replica (each flushes every few seconds), plus the
// live (non-calibration) and calibration summaries.
type StatsResponse struct {
	compare.Totals
	// Live merges every non-calibration mode: what the gates judge.
	Live compare.Summary `json:"live"`
	// Calibration merges the calibration modes: the noise floor.
	Calibration compare.Summary `json:"calibration"`
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
	writeJSON(w, http.StatusOK, StatsResponse{Totals: t, Live: t.Live(), Calibration: t.Calibration()})
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
