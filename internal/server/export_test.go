package server

import "reflect"

// OccupySlots takes n of the server's in-flight slots, as n slow calls
// would, and returns the function that gives them back.
func OccupySlots(s *Server, n int) (release func()) {
	for range n {
		s.inflight <- struct{}{}
	}
	return func() {
		for range n {
			<-s.inflight
		}
	}
}

// UnknownFieldPath is unknownFieldPath for a value of v's type.
func UnknownFieldPath(data []byte, v any) string {
	return unknownFieldPath(data, reflect.TypeOf(v))
}
