package dualwrite

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	shadowSkipped prometheus.Counter
	shadowPanics  prometheus.Counter
	shadowCleaned prometheus.Counter
	modeFallbacks prometheus.Counter
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
		modeFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_dualwrite_mode_fallbacks_total", ConstLabels: labels,
			Help: "Calls where the mode source failed and the facade used Redis authority.",
		}),
	}
	for _, c := range []prometheus.Collector{m.shadowSkipped, m.shadowPanics, m.shadowCleaned, m.modeFallbacks} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
