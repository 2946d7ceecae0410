package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"
)

// RequestIDHeader carries a request's id in and out. A caller's id is kept
// when it is 1..128 characters of letters, digits and ".:_-"; otherwise
// the server makes one.
const RequestIDHeader = "X-Request-Id"

// ActorHeader names who makes an admin change (recorded in the flags file
// and the audit) when the call comes with the shared admin token, which
// names no person. Default: "admin-api". An operator's call is recorded
// under the operator's own name, whatever the header says.
const ActorHeader = "X-Reservoir-Actor"

type ctxKey int

const requestIDKey ctxKey = iota

// RequestID returns the request id the server gave ctx's request ("" if
// none).
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(".:_-", c) >= 0) {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// recorder remembers the status and size of a response.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

// WriteHeader implements http.ResponseWriter.
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// quietRoutes are logged at debug level: probes and scrapes every few
// seconds would drown the access log.
var quietRoutes = map[string]bool{"GET /healthz": true, "GET /readyz": true, "GET /metrics": true}

// outer wraps every route: request id in and out, panic recovery, and one
// structured access log line per request. It never logs headers (the admin
// token travels in one) nor the query string.
func (s *Server) outer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID(id) {
			id = newRequestID()
		}
		w.Header().Set(RequestIDHeader, id)
		r = r.WithContext(context.WithValue(r.Context(), requestIDKey, id))
		rec := &recorder{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("server: handler panicked", "request_id", id, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				if rec.status == 0 {
					writeProblem(rec, r, problem{Status: http.StatusInternalServerError, Code: "internal", Message: "the server failed while answering; see its log for the request id"})
				}
			}
			nameSpan(r, id)
			level := slog.LevelInfo
			if quietRoutes[r.Pattern] {
				level = slog.LevelDebug
			}
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			s.log.LogAttrs(r.Context(), level, "http request",
				slog.String("request_id", id),
				slog.String("method", r.Method),
				slog.String("path", r.URL.Path),
				slog.String("route", r.Pattern),
				slog.Int("status", status),
				slog.Int64("bytes", rec.bytes),
				slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
				slog.String("remote", r.RemoteAddr),
			)
		}()
		next.ServeHTTP(rec, r)
	})
}

// route registers h on pattern with the per-route metrics. A limited
// route (the admin API's reads) gets the request timeout and one of the
// admin listener's AdminMaxInFlight slots, or 503 at once; checkout calls
// are admitted by apiOp instead, and health, metrics, the dashboard and
// the kill switch take no slot.
func (s *Server) route(mux *http.ServeMux, pattern string, limited bool, h http.HandlerFunc) {
	mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec, ok := w.(*recorder)
		if !ok {
			rec = &recorder{ResponseWriter: w}
		}
		if limited {
			ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
			defer cancel()
			r = r.WithContext(ctx)
			select {
			case s.adminSlots <- struct{}{}:
				defer func() { <-s.adminSlots }()
			default:
				writeProblem(rec, r, problem{Status: http.StatusServiceUnavailable, Code: "overloaded",
					Message: fmt.Sprintf("the admin API is serving its maximum of %d calls; retry shortly", cap(s.adminSlots)), RetryAfter: time.Second})
				s.metrics.requests.WithLabelValues(pattern, fmt.Sprint(http.StatusServiceUnavailable)).Inc()
				return
			}
		}
		h(rec, r)
		code := rec.status
		if code == 0 {
			code = http.StatusOK
		}
		s.metrics.requests.WithLabelValues(pattern, fmt.Sprint(code)).Inc()
		s.metrics.seconds.WithLabelValues(pattern).Observe(time.Since(start).Seconds())
	}))
}
