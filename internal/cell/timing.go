package cell

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/reservation"
)

// StoreCallMetric is the name of the histogram of every store call the
// facades make (authority and shadow alike), labelled reservoir_pod,
// store, op and result. The dashboard's per-store latency and the Grafana
// board read it.
const StoreCallMetric = "reservoir_store_call_seconds"

// Results of a store call (the result label of StoreCallMetric).
const (
	// ResultOK: the call answered without an error.
	ResultOK = "ok"
	// ResultDomain: the call answered with one of reservation's sentinel
	// errors (not found, already claimed, invalid input, ...): an answer,
	// not a failure.
	ResultDomain = "domain"
	// ResultError: the store failed (network, timeout, server, a bug).
	ResultError = "error"
)

// storeBuckets resolve a Redis script (tens of microseconds) and a MySQL
// transaction under contention (hundreds of milliseconds).
var storeBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// storeTimer measures store calls. Every pod's stores share one histogram.
type storeTimer struct {
	seconds *prometheus.HistogramVec
}

func newStoreTimer(reg prometheus.Registerer) (*storeTimer, error) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: StoreCallMetric,
		Help: "Time of each call the facade makes to a store (as authority or as shadow), by pod, store, " +
			"operation and result (ok, domain: a sentinel error such as not_found, error: the store failed).",
		Buckets: storeBuckets,
	}, []string{"reservoir_pod", "store", "op", "result"})
	if err := reg.Register(h); err != nil {
		return nil, err
	}
	return &storeTimer{seconds: h}, nil
}

// wrap returns s with every call timed.
func (t *storeTimer) wrap(pod string, s reservation.Store) reservation.Store {
	return &timedStore{Store: s, pod: pod, store: string(s.Name()), t: t}
}

// timedStore is a reservation.Store that times each call of the one it
// wraps. It adds nothing else: the facade still sees the store's answers
// and errors unchanged.
type timedStore struct {
	reservation.Store
	pod, store string
	t          *storeTimer
}

var _ reservation.Store = (*timedStore)(nil)

func (s *timedStore) observe(op string, start time.Time, err error) {
	result := ResultOK
	switch {
	case err == nil:
	case reservation.AnswerName(err) != "": // an answer about the reservation, not a failure
		result = ResultDomain
	default:
		result = ResultError
	}
	s.t.seconds.WithLabelValues(s.pod, s.store, op, result).Observe(time.Since(start).Seconds())
}

// Reserve times the wrapped store's Reserve.
func (s *timedStore) Reserve(ctx context.Context, p *reservation.ReserveParams) (r reservation.ReserveResult, err error) {
	defer func(start time.Time) { s.observe("reserve", start, err) }(time.Now())
	return s.Store.Reserve(ctx, p)
}

// Claim times the wrapped store's Claim.
func (s *timedStore) Claim(ctx context.Context, p *reservation.ClaimParams) (r reservation.ClaimResult, err error) {
	defer func(start time.Time) { s.observe("claim", start, err) }(time.Now())
	return s.Store.Claim(ctx, p)
}

// Release times the wrapped store's Release.
func (s *timedStore) Release(ctx context.Context, p *reservation.ReleaseParams) (r reservation.ReleaseResult, err error) {
	defer func(start time.Time) { s.observe("release", start, err) }(time.Now())
	return s.Store.Release(ctx, p)
}

// Get times the wrapped store's Get.
func (s *timedStore) Get(ctx context.Context, p *reservation.GetParams) (h reservation.Hold, err error) {
	defer func(start time.Time) { s.observe("get", start, err) }(time.Now())
	return s.Store.Get(ctx, p)
}

// Adjust times the wrapped store's Adjust.
func (s *timedStore) Adjust(ctx context.Context, p *reservation.AdjustParams) (r reservation.AdjustResult, err error) {
	defer func(start time.Time) { s.observe("adjust", start, err) }(time.Now())
	return s.Store.Adjust(ctx, p)
}

// Availability times the wrapped store's Availability.
func (s *timedStore) Availability(ctx context.Context, p *reservation.AvailabilityParams) (r reservation.AvailabilityResult, err error) {
	defer func(start time.Time) { s.observe("availability", start, err) }(time.Now())
	return s.Store.Availability(ctx, p)
}

// Reap times the wrapped store's Reap.
func (s *timedStore) Reap(ctx context.Context, p *reservation.ReapParams) (r reservation.ReapResult, err error) {
	defer func(start time.Time) { s.observe("reap", start, err) }(time.Now())
	return s.Store.Reap(ctx, p)
}
