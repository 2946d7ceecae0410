package dualwrite

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	shadowSkipped prometheus.Counter
	shadowPanics  prometheus.Counter
	shadowCleaned prometheus.Counter
	// shadowRepairFailed counts shadow repairs that ran out of time.
	shadowRepairFailed prometheus.Counter
	modeFallbacks      prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, pod string) (*metrics, error) {
	labels := prometheus.Labels{"pod": pod}
	m := &metrics{
		shadowSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_dualwrite_shadow_skipped_total", ConstLabels: labels,
			Help: "Shadow calls not run because every shadow slot was busy.",
		}),
		shadowPanics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_dualwrite_shadow_panics_total", ConstLabels: labels,
			Help: "Shadow calls that panicked (recovered; the caller's answer was unaffected).",
		}),
		shadowCleaned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_dualwrite_shadow_cleaned_total", ConstLabels: labels,
			Help: "Shadow holds released because the authority did not hold the cart.",
		}),
		shadowRepairFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_dualwrite_shadow_repair_failures_total", ConstLabels: labels,
			Help: "Shadow writes that must not be lost (an orphaned hold's release, a failed shadow release or settle) still failing after their retries: the shadow keeps a hold nobody owns until it expires or a reconcile repairs it.",
		}),
		modeFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_dualwrite_mode_fallbacks_total", ConstLabels: labels,
			Help: "Calls where the mode source failed and the facade used Redis authority.",
		}),
	}
	for _, c := range []prometheus.Collector{m.shadowSkipped, m.shadowPanics, m.shadowCleaned, m.shadowRepairFailed, m.modeFallbacks} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
