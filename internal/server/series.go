package server

import (
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/wire"
)

// maxSamples is how many samples the sampler keeps (at the default 2s,
// six minutes).
const maxSamples = 180

// seriesOps are the operations whose store latency each series point
// carries: the checkout path.
var seriesOps = []string{"reserve", "claim", "release"}

// sampler keeps, every interval, a snapshot of this replica's counters and
// histograms (API operations, store call latency, compare classes), so
// that /admin/series can give rates and quantiles over a trailing window
// without a Prometheus server. It reads the registry like a scrape does.
type sampler struct {
	reg    prometheus.Gatherer
	every  time.Duration
	window time.Duration
	log    *slog.Logger

	mu      sync.Mutex
	samples []snapshot // oldest first

	done chan struct{}
	wg   sync.WaitGroup
}

type snapshot struct {
	at   time.Time
	pods map[string]*podSnap
}

type podSnap struct {
	ops     map[string]float64            // op -> API operations
	classes map[string]float64            // class -> observations (calibration modes excluded)
	lat     map[string]map[string]*bucket // store -> op -> cumulative buckets
}

// bucket is a histogram's cumulative counts.
type bucket struct {
	count float64
	upper []float64
	cum   []float64
}

func startSampler(reg prometheus.Gatherer, every, window time.Duration, log *slog.Logger) *sampler {
	s := &sampler{reg: reg, every: every, window: window, log: log, done: make(chan struct{})}
	s.take()
	s.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				s.take()
			}
		}
	})
	return s
}

func (s *sampler) stop() {
	close(s.done)
	s.wg.Wait()
}

func (s *sampler) pod(snap *snapshot, name string) *podSnap {
	p := snap.pods[name]
	if p == nil {
		p = &podSnap{ops: map[string]float64{}, classes: map[string]float64{}, lat: map[string]map[string]*bucket{}}
		snap.pods[name] = p
	}
	return p
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func (s *sampler) take() {
	fams, err := s.reg.Gather()
	if err != nil && len(fams) == 0 {
		s.log.Warn("server: sample metrics failed", "err", err)
		return
	}
	snap := snapshot{at: time.Now(), pods: map[string]*podSnap{}}
	for _, f := range fams {
		switch f.GetName() {
		case OperationsMetric:
			for _, m := range f.GetMetric() {
				s.pod(&snap, label(m, "reservoir_pod")).ops[label(m, "op")] += m.GetCounter().GetValue()
			}
		case "reservoir_compare_observations_total":
			for _, m := range f.GetMetric() {
				if compare.IsCalibration(label(m, "mode")) {
					continue
				}
				s.pod(&snap, label(m, "reservoir_pod")).classes[label(m, "class")] += m.GetCounter().GetValue()
			}
		case cell.StoreCallMetric:
			for _, m := range f.GetMetric() {
				p := s.pod(&snap, label(m, "reservoir_pod"))
				store, op := label(m, "store"), label(m, "op")
				if p.lat[store] == nil {
					p.lat[store] = map[string]*bucket{}
				}
				b := p.lat[store][op]
				h := m.GetHistogram()
				if b == nil {
					b = &bucket{}
					for _, bk := range h.GetBucket() {
						b.upper = append(b.upper, bk.GetUpperBound())
					}
					b.cum = make([]float64, len(b.upper))
					p.lat[store][op] = b
				}
				b.count += float64(h.GetSampleCount())
				for i, bk := range h.GetBucket() {
					if i < len(b.cum) {
						b.cum[i] += float64(bk.GetCumulativeCount())
					}
				}
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, snap)
	if len(s.samples) > maxSamples {
		// A new array: series reads the old one's samples without the
		// lock, and shifting them in place raced with it.
		s.samples = slices.Clone(s.samples[len(s.samples)-maxSamples:])
	}
}

const seriesSource = "this replica only: its API operation counters, store call histograms and compare counters, " +
	"sampled in process; latency quantiles are interpolated from histogram buckets"

// series returns the last n points of each pod.
func (s *sampler) series(pods []string, n int) wire.Series {
	s.mu.Lock()
	samples := s.samples
	s.mu.Unlock()
	out := wire.Series{IntervalMs: s.every.Milliseconds(), WindowMs: s.window.Milliseconds(), Source: seriesSource, Pods: map[string][]wire.SeriesPoint{}}
	for _, pod := range pods {
		out.Pods[pod] = []wire.SeriesPoint{}
	}
	first := max(0, len(samples)-n)
	for i := first; i < len(samples); i++ {
		// The base is the newest sample at least a window older; the
		// first samples use the oldest one there is.
		j := sort.Search(i, func(k int) bool { return samples[k].at.After(samples[i].at.Add(-s.window)) }) - 1
		if j < 0 {
			j = 0
		}
		if j == i {
			continue
		}
		for _, pod := range pods {
			out.Pods[pod] = append(out.Pods[pod], point(samples[j], samples[i], pod))
		}
	}
	return out
}

func point(a, b snapshot, pod string) wire.SeriesPoint {
	secs := b.at.Sub(a.at).Seconds()
	p := wire.SeriesPoint{At: b.at.UTC(), ByOp: map[string]float64{}, ClassRates: map[string]float64{}, Latency: map[string]map[string]wire.Quantiles{}}
	pa, pb := a.pods[pod], b.pods[pod]
	if pb == nil {
		return p
	}
	if pa == nil {
		pa = &podSnap{}
	}
	for op, v := range pb.ops {
		d := (v - pa.ops[op]) / secs
		p.ByOp[op] = d
		p.OpsPerSec += d
	}
	var obs float64
	deltas := map[string]float64{}
	for cl, v := range pb.classes {
		d := v - pa.classes[cl]
		obs += d
		deltas[cl] = d
	}
	p.ObservationsPerSec = obs / secs
	if obs > 0 {
		for cl, d := range deltas {
			if cl != string(compare.ClassMatch) && d > 0 {
				p.ClassRates[cl] = d / obs
			}
		}
	}
	for store, ops := range pb.lat {
		for _, op := range seriesOps {
			hb := ops[op]
			if hb == nil {
				continue
			}
			var ha *bucket
			if pa.lat != nil && pa.lat[store] != nil {
				ha = pa.lat[store][op]
			}
			q, ok := quantiles(ha, hb, secs)
			if !ok {
				continue
			}
			if p.Latency[store] == nil {
				p.Latency[store] = map[string]wire.Quantiles{}
			}
			p.Latency[store][op] = q
		}
	}
	return p
}

// quantiles computes p50 and p99 of the observations between two
// cumulative histograms.
func quantiles(a, b *bucket, secs float64) (wire.Quantiles, bool) {
	count := b.count
	cum := append([]float64(nil), b.cum...)
	if a != nil && len(a.cum) == len(cum) {
		count -= a.count
		for i := range cum {
			cum[i] -= a.cum[i]
		}
	}
	if count <= 0 {
		return wire.Quantiles{}, false
	}
	q := func(phi float64) float64 {
		rank := phi * count
		lower, prev := 0.0, 0.0
		for i, c := range cum {
			if c >= rank {
				upper := b.upper[i]
				if math.IsInf(upper, 1) {
					return lower
				}
				if c == prev {
					return upper
				}
				return lower + (upper-lower)*(rank-prev)/(c-prev)
			}
			lower, prev = b.upper[i], c
		}
		// Above the highest finite bucket: the best bound there is.
		return lower
	}
	return wire.Quantiles{P50Ms: q(0.5) * 1000, P99Ms: q(0.99) * 1000, CallsPerSec: count / secs}, true
}
