package server

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// intParam reads an optional integer query parameter within [lo, hi].
func intParam(r *http.Request, name string, def, lo, hi int) (int, *problem) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, badInput(name, "%s: want an integer between %d and %d, got %q", name, lo, hi, v)
	}
	return n, nil
}

// podParam reads the optional pod query parameter ("" is every pod).
func (s *Server) podParam(r *http.Request, required bool) (string, *problem) {
	pod := r.URL.Query().Get("pod")
	if pod == "" {
		if required {
			return "", badInput("pod", "pod: required (pods: %s)", strings.Join(s.cfg.Cell.Topology.PodNames(), ", "))
		}
		return "", nil
	}
	if s.cfg.Cell.Pod(pod) == nil {
		return "", badInput("pod", "pod: no pod %q in the topology (pods: %s)", pod, strings.Join(s.cfg.Cell.Topology.PodNames(), ", "))
	}
	return pod, nil
}

// sinceParam reads since: an RFC 3339 time, or a duration meaning that long
// ago ("15m"). Default: 1h ago.
func sinceParam(r *http.Request, now time.Time) (time.Time, *problem) {
	v := r.URL.Query().Get("since")
	if v == "" {
		return now.Add(-time.Hour), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, badInput("since", `since: want an RFC 3339 time ("2025-03-04T05:06:07Z") or a positive duration ("15m"), got %q`, v)
}
