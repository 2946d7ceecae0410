package dualwrite

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	shadowSkipped prometheus.Counter
	shadowPanics  prometheus.Counter
	shadowCleaned prometheus.Counter
	// flagsUnavailable counts calls refused because the flags could not
	// be read (the replica is in doubt).
	flagsUnavailable prometheus.Counter
	// rerouted counts calls a store refused as not the shop's decider,
	// by what the facade did: followed (a newer fence), handed_off (its
	// flags were newer).
	rerouted *prometheus.CounterVec
	// unreachable counts calls answered "outcome unknown" because the
	// shop's decider could not be reached or settled, by reason.
	unreachable *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, pod string) (*metrics, error) {
	labels := prometheus.Labels{"reservoir_pod": pod}
	m := &metrics{
		shadowSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_dualwrite_shadow_skipped_total", ConstLabels: labels,
			Help: "Shadow calls (comparisons) not run because every shadow slot was busy, or refused by the shadow store because it keeps nothing of its own for the shop now (a handoff to it copies the decider's state in).",
		}),
		shadowPanics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_dualwrite_shadow_panics_total", ConstLabels: labels,
			Help: "Shadow calls that panicked (recovered; the caller's answer was unaffected).",
		}),
		shadowCleaned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_dualwrite_shadow_cleaned_total", ConstLabels: labels,
			Help: "MySQL shadow holds released because Redis, which decided, held nothing for the cart.",
		}),
		flagsUnavailable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_dualwrite_flags_unavailable_total", ConstLabels: labels,
			Help: "Calls answered 503 because this replica could not read its flags (it never guesses a mode).",
		}),
		rerouted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_dualwrite_rerouted_total", ConstLabels: labels,
			Help: "Calls a store refused because its fence names the other store, by what the facade did: " +
				"followed (the fence is newer than this replica's flags) or handed_off (the flags are newer: the shop was handed off).",
		}, []string{"action"}),
		unreachable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_dualwrite_owner_unreachable_total", ConstLabels: labels,
			Help: "Calls answered 503 (outcome unknown, retry) because the shop's deciding store could not be settled: " +
				"handoff (a handoff did not finish), hops (the stores kept naming each other).",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.shadowSkipped, m.shadowPanics, m.shadowCleaned, m.flagsUnavailable, m.rerouted, m.unreachable} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
