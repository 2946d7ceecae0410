package server

import "net/http"

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

// APIHandler is the checkout listener's handler, as Serve runs it.
func (s *Server) APIHandler() http.Handler { return s.api }

// AdminHandler is the admin listener's handler, as Serve runs it.
func (s *Server) AdminHandler() http.Handler { return s.adminH }

// AdminPatterns lists every route the admin listener serves, as
// registered.
func (s *Server) AdminPatterns() []string {
	var out []string
	for _, r := range s.routeTable {
		if r.Listener == AdminListener {
			out = append(out, r.Pattern)
		}
	}
	return out
}

// AdminAccess is the role table: the least role each admin listener
// route needs, or "public".
func AdminAccess() map[string]string { return adminAccess }

// RoleRank orders the admin roles (viewer 1, operator 2, admin 3).
func RoleRank() map[string]int { return roleRank }

// OccupyAdminSlots takes every admin read slot, as AdminMaxInFlight slow
// reads would, and returns the function that gives them back.
func OccupyAdminSlots(s *Server) (release func()) {
	n := cap(s.adminSlots)
	for range n {
		s.adminSlots <- struct{}{}
	}
	return func() {
		for range n {
			<-s.adminSlots
		}
	}
}

// ProblemCodes is every error code the server answers (problemTitles'
// keys), for the OpenAPI document's ErrorCode enumeration to match.
func ProblemCodes() []string {
	codes := make([]string, 0, len(problemTitles))
	for c := range problemTitles {
		codes = append(codes, c)
	}
	return codes
}
