package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// OperationsMetric is the counter of checkout API operations by pod, op
// and status code; the dashboard's operations per second come from it.
const OperationsMetric = "reservoir_api_operations_total"

type metrics struct {
	requests     *prometheus.CounterVec
	seconds      *prometheus.HistogramVec
	operations   *prometheus.CounterVec
	authFailures *prometheus.CounterVec
	refused      *prometheus.CounterVec
	killObeyed   prometheus.Histogram
}

var httpBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

func newMetrics(reg prometheus.Registerer, c *cell.Cell) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "reservoir_http_request_duration_seconds",
			Help:    "HTTP request handling time by route pattern.",
			Buckets: httpBuckets,
		}, []string{"route"}),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: OperationsMetric,
			Help: "Checkout API operations by pod, operation (reserve, claim, release, get, availability, adjust) " +
				"and status code (201 reserved, 409 insufficient or conflict, 503 outcome unknown: retry, ...).",
		}, []string{"reservoir_pod", "op", "code"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_admin_auth_failures_total",
			Help: "Admin API calls refused for a missing or wrong bearer token, and /readyz calls with a wrong one, by reason.",
		}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_api_refused_total",
			Help: "Checkout API calls refused before their handler ran, by the answer's error code: unauthorized, forbidden, " +
				"unsupported_media_type, body_too_large, overloaded (a pod's slots and queue full, or the body budget spent), and the like.",
		}, []string{"reason"}),
		killObeyed: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "reservoir_killswitch_obeyed_seconds",
			Help:    "Time from writing a kill switch change (admin API) to this replica's flag source answering it.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
	}
	for _, col := range []prometheus.Collector{m.requests, m.seconds, m.operations, m.authFailures, m.refused, m.killObeyed, &rolloutCollector{c: c}} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// rolloutCollector exports, at scrape time, what this replica applies per
// pod, from the flags document its flag source answers from (never a
// re-read of the store): the share of the pod's shops in each mode (a
// percentage ramp splits the pod; no shop is guessed), the kill switch,
// one series per value so that alerts can say
// `reservoir_rollout_kill_switch{state!="off"} == 1`, and the share MySQL
// decides. A pod whose flags are not loaded has every value at 0: the
// replica applies no mode (it answers 503), and
// reservoir_rollout_flags_loaded says why.
type rolloutCollector struct {
	c *cell.Cell
}

var (
	descMode = prometheus.NewDesc("reservoir_rollout_mode",
		"The share (0 to 1) of the pod's shops without an override that this replica's flags put in each mode: 1 for the pod's mode, or split by a percentage ramp.",
		[]string{"reservoir_pod", "mode"}, nil)
	descKill = prometheus.NewDesc("reservoir_rollout_kill_switch",
		"1 for the kill switch state this replica's flag source answers for a shop of the pod, 0 for the others.",
		[]string{"reservoir_pod", "state"}, nil)
	descAuthority = prometheus.NewDesc("reservoir_rollout_mysql_authority",
		"The share (0 to 1) of the pod's shops without an override that this replica's flags give MySQL to decide (after the kill switch); each shop's fence follows on its next call.",
		[]string{"reservoir_pod"}, nil)
	descLoaded = prometheus.NewDesc("reservoir_rollout_flags_loaded",
		"1 when this replica's flag source has a valid flags file in force; 0 means it answers every reservation call 503 flags_unavailable and is not ready.",
		nil, nil)
	descRejected = prometheus.NewDesc("reservoir_rollout_flags_rejected",
		"1 while this replica's flag source refused the newest flags document it saw (invalid JSON, an unknown variant, ...) and answers from the last valid one; "+
			"/admin/rollout/status says why, with the line and column. 0 once a valid document loads.",
		nil, nil)
	descApplied = prometheus.NewDesc("reservoir_rollout_flags_applied_version",
		"The version of the flags this replica's flag source answers with (0 while none is loaded); the fleet obeys a change when every replica reports its version.",
		nil, nil)
	descPoolMax = prometheus.NewDesc("reservoir_mysql_pool_max_connections",
		"The size of this replica's MySQL connection pool for the pod: what its callers can occupy at most (and its checkout slots).",
		[]string{"reservoir_pod"}, nil)
	descShopKills = prometheus.NewDesc("reservoir_rollout_shop_kill_switches",
		"Shops whose own kill switch is engaged in the flags file (shops are never a label).",
		nil, nil)
)

// Describe implements prometheus.Collector.
func (rc *rolloutCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPoolMax, descMode, descKill, descAuthority, descLoaded, descRejected, descApplied, descShopKills} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (rc *rolloutCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	var inForce *flagdoc.Flags
	if doc, ok := rc.c.Flags.InForce(); ok {
		inForce, _ = flagdoc.ParseFlags(doc) // nil for a document with flags of other teams: shop 0's answer below
	}
	for _, p := range rc.c.Pods() {
		ch <- prometheus.MustNewConstMetric(descPoolMax, prometheus.GaugeValue, float64(p.DB.Stats().MaxOpenConnections), p.Name)
	}
	for _, pod := range rc.c.Topology.PodNames() {
		shares, kill, ok := podShares(ctx, rc.c, inForce, pod)
		mysql := 0.0
		for _, m := range authority.Modes {
			if ok && (authority.Decision{Mode: m, Kill: kill}).Route().Authority == "mysql" {
				mysql += shares[m]
			}
			ch <- prometheus.MustNewConstMetric(descMode, prometheus.GaugeValue, shares[m], pod, string(m))
		}
		for _, k := range authority.Kills {
			ch <- prometheus.MustNewConstMetric(descKill, prometheus.GaugeValue, b(ok && kill == k), pod, string(k))
		}
		ch <- prometheus.MustNewConstMetric(descAuthority, prometheus.GaugeValue, mysql, pod)
	}
	ch <- prometheus.MustNewConstMetric(descLoaded, prometheus.GaugeValue, b(rc.c.Flags.Loaded()))
	_, rejected := rc.c.Flags.Rejected()
	ch <- prometheus.MustNewConstMetric(descRejected, prometheus.GaugeValue, b(rejected != nil && rc.c.Flags.Loaded()))
	applied, _ := rc.c.Flags.AppliedVersion(ctx)
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(applied))
	n := 0
	if inForce != nil {
		for _, s := range inForce.Shops {
			if s.Kill.Engaged() {
				n++
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(descShopKills, prometheus.GaugeValue, float64(n))
}

// podShares is the share of pod's shops (without an override) in each
// mode, and the pod's kill switch, under the flags in force; ok is false
// while none are loaded. Without a parsed document it falls back to the
// flag source's answer for a shop of the pod outside any ramp.
func podShares(ctx context.Context, c *cell.Cell, f *flagdoc.Flags, pod string) (shares map[authority.Mode]float64, kill authority.Kill, ok bool) {
	shares = map[authority.Mode]float64{}
	if f == nil {
		d, err := c.Flags.Decide(ctx, pod, 0)
		if err != nil {
			return shares, authority.KillOff, false
		}
		shares[d.Mode] = 1
		return shares, d.Kill, true
	}
	pf := f.Pods[pod]
	base := pf.Mode
	if base == "" {
		base = f.Mode
	}
	shares[base] = 1
	if pf.Ramp != nil {
		p := float64(pf.Ramp.Percent) / 100
		shares[base] -= p
		shares[pf.Ramp.Mode] += p
	}
	return shares, f.Resolve(pod, 0).Kill, true
}
