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
func (s *Server) AdminPatterns() []string { return s.adminPatterns }

// AdminAccess is the role table: the least role each admin listener
// route needs, or "public".
func AdminAccess() map[string]string { return adminAccess }

// RoleRank orders the admin roles (viewer 1, operator 2, admin 3).
func RoleRank() map[string]int { return roleRank }
