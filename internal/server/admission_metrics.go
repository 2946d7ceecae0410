package server

import "github.com/prometheus/client_golang/prometheus"

// registerPlaceMetrics registers the checkout listener's places (admission
// step 0): how many it has, how many connections hold one, how often the
// next connection had to wait for one, and how many idle keep-alive
// connections were closed for a connection waiting. They read zero while
// Serve does not run with a cap.
func (s *Server) registerPlaceMetrics(reg prometheus.Registerer) error {
	read := func(f func(*placeListener) float64) func() float64 {
		return func() float64 {
			if l := s.places.Load(); l != nil {
				return f(l)
			}
			return 0
		}
	}
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "reservoir_checkout_connection_places",
			Help: "Connections the checkout listener keeps open at most (MaxConns); more wait in the kernel's accept queue."},
			read(func(l *placeListener) float64 { return float64(cap(l.places)) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "reservoir_checkout_connections",
			Help: "Checkout connections open now (each holds a place)."},
			read(func(l *placeListener) float64 { return float64(l.open.Load()) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "reservoir_checkout_connection_waits_total",
			Help: "Times the checkout listener found every place taken, and the next connection waited in the kernel's accept queue."},
			read(func(l *placeListener) float64 { return float64(l.waited.Load()) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "reservoir_checkout_idle_connections_closed_total",
			Help: "Idle keep-alive checkout connections closed because every place was taken."},
			read(func(l *placeListener) float64 { return float64(l.closedIdle.Load()) })),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
