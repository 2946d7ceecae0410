package server

// OccupySlots takes n of pod's checkout slots, as n slow calls would, and
// returns the function that gives them back.
func OccupySlots(s *Server, pod string, n int) (release func()) {
	g := s.gates[pod]
	for range n {
		g.slots <- struct{}{}
	}
	return func() {
		for range n {
			<-g.slots
		}
	}
}
