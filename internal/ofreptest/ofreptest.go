// Package ofreptest is an OFREP service for tests: a real HTTP server on
// 127.0.0.1 implementing the OpenFeature Remote Evaluation Protocol's
// single-flag evaluation (POST /ofrep/v1/evaluate/flags/{key}), backed by
// flagd's own in-process evaluator holding one flags document, as flagd's
// OFREP service answers from the flags it reads. The test replaces the
// document at will, can require a bearer token, and can serve TLS.
//
// It evaluates what it is given: it does not check reservoir's rules
// (versions, known variants), so a test can show what a client does with
// answers a careless flag service would give.
package ofreptest

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/open-feature/flagd/core/pkg/evaluator"
	flagdlog "github.com/open-feature/flagd/core/pkg/logger"
	"github.com/open-feature/flagd/core/pkg/store"
	isync "github.com/open-feature/flagd/core/pkg/sync"
)

// EvaluatePath is where the protocol's single-flag evaluations are posted,
// followed by the flag's key.
const EvaluatePath = "/ofrep/v1/evaluate/flags/"

// source is the name the documents are stored under in flagd's store.
const source = "ofreptest"

// Server is a running OFREP service. Safe for concurrent use.
type Server struct {
	t        testing.TB
	http     *httptest.Server
	token    string
	listener net.Listener

	mu   sync.RWMutex
	eval *evaluator.JSON

	requests atomic.Int64
}

// Option configures a Server.
type Option func(*Server)

// WithListener serves on l instead of a new listener on a free port: a
// test can reserve an address, start a client against it while nothing
// answers there, and only then start the server.
func WithListener(l net.Listener) Option { return func(s *Server) { s.listener = l } }

// WithToken makes the server answer 401 to every request without
// "Authorization: Bearer <token>".
func WithToken(token string) Option { return func(s *Server) { s.token = token } }

// New starts a server on 127.0.0.1 serving doc (flagd's flag definition
// format), plaintext, and stops it when the test ends.
func New(t testing.TB, doc string, opts ...Option) *Server {
	t.Helper()
	return start(t, doc, nil, opts)
}

// NewTLS is New serving TLS with config.
func NewTLS(t testing.TB, doc string, config *tls.Config, opts ...Option) *Server {
	t.Helper()
	return start(t, doc, config, opts)
}

func start(t testing.TB, doc string, config *tls.Config, opts []Option) *Server {
	t.Helper()
	s := &Server{t: t}
	for _, o := range opts {
		o(s)
	}
	s.Set(doc)
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+EvaluatePath+"{key}", s.evaluate)
	s.http = httptest.NewUnstartedServer(mux)
	if s.listener != nil {
		_ = s.http.Listener.Close()
		s.http.Listener = s.listener
	}
	if config != nil {
		s.http.TLS = config
		s.http.StartTLS()
	} else {
		s.http.Start()
	}
	t.Cleanup(s.http.Close)
	return s
}

// URL is the server's base URL (http://127.0.0.1:port, or https://).
func (s *Server) URL() string { return s.http.URL }

// Requests is the number of evaluation requests received so far.
func (s *Server) Requests() int64 { return s.requests.Load() }

// Set replaces the document every later evaluation answers from. A
// document flagd's parser refuses fails the test.
func (s *Server) Set(doc string) {
	s.t.Helper()
	quiet := flagdlog.NewLogger(nil, false)
	st, err := store.NewStore(quiet, []string{source})
	if err != nil {
		s.t.Fatalf("ofreptest: flagd store: %v", err)
	}
	e := evaluator.NewJSON(quiet, st)
	if err := e.SetState(isync.DataSync{FlagData: doc, Source: source}); err != nil {
		s.t.Fatalf("ofreptest: flagd refuses the document: %v", err)
	}
	s.mu.Lock()
	s.eval = e
	s.mu.Unlock()
}

// success is the protocol's evaluation success body.
type success struct {
	Key      string         `json:"key"`
	Value    any            `json:"value"`
	Reason   string         `json:"reason"`
	Variant  string         `json:"variant"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// failure is the protocol's evaluation failure body.
type failure struct {
	Key          string `json:"key,omitempty"`
	ErrorCode    string `json:"errorCode"`
	ErrorDetails string `json:"errorDetails"`
}

func (s *Server) evaluate(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	key := r.PathValue("key")
	if s.token != "" && r.Header.Get("Authorization") != "Bearer "+s.token {
		reply(w, http.StatusUnauthorized, failure{Key: key, ErrorCode: "GENERAL", ErrorDetails: "missing or wrong bearer token"})
		return
	}
	var req struct {
		Context map[string]any `json:"context"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		reply(w, http.StatusBadRequest, failure{Key: key, ErrorCode: "INVALID_CONTEXT", ErrorDetails: "request body: " + err.Error()})
		return
	}
	if req.Context == nil {
		req.Context = map[string]any{}
	}
	s.mu.RLock()
	e := s.eval
	s.mu.RUnlock()
	v := e.ResolveAsAnyValue(r.Context(), "", key, req.Context)
	if v.Error != nil {
		code := v.Error.Error()
		status := http.StatusBadRequest
		if code == "FLAG_NOT_FOUND" || code == "FLAG_DISABLED" {
			// flagd's OFREP service answers a disabled flag as missing too.
			status = http.StatusNotFound
		}
		if strings.ContainsAny(code, " :") {
			code = "GENERAL"
		}
		reply(w, status, failure{Key: key, ErrorCode: code, ErrorDetails: fmt.Sprintf("flag %q: %v", key, v.Error)})
		return
	}
	reply(w, http.StatusOK, success{Key: key, Value: v.Value, Reason: v.Reason, Variant: v.Variant, Metadata: v.Metadata})
}

func reply(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
