package server

import (
	"embed"
	"net/http"
	"path"
)

// The dashboard is three static files: the page, its script and its style.
// They hold no data: the script reads the admin API with the token the
// operator pastes in (or passes in the URL fragment, #token=..., which a
// browser never sends to the server, so it never reaches an access log).
//
//go:embed dashboard/index.html dashboard/app.js dashboard/style.css
var dashboardFS embed.FS

// dashboardCSP allows the page nothing but its own files and its own API.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var dashboardTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

func (s *Server) serveDashboardFile(w http.ResponseWriter, r *http.Request, name string) {
	b, err := dashboardFS.ReadFile("dashboard/" + name)
	if err != nil {
		writeProblem(w, r, problem{Status: http.StatusNotFound, Code: "no_route", Message: "no such dashboard file"})
		return
	}
	h := w.Header()
	h.Set("Content-Type", dashboardTypes[path.Ext(name)])
	h.Set("Content-Security-Policy", dashboardCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

func (s *Server) dashboard(w http.ResponseWriter, r *http.Request) {
	s.serveDashboardFile(w, r, "index.html")
}

func (s *Server) dashboardAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if name == "index.html" || dashboardTypes[path.Ext(name)] == "" {
		writeProblem(w, r, problem{Status: http.StatusNotFound, Code: "no_route", Message: "no such dashboard file"})
		return
	}
	s.serveDashboardFile(w, r, name)
}
