// Package flagdtest is a flagd sync server for tests: a real gRPC server on
// 127.0.0.1 implementing flagd's flagd.sync.v1.FlagSyncService, serving one
// flags document that the test replaces at will, as a flagd daemon serves
// the flags it reads. A test can also break every open stream, and stop
// and restart the server on the same address, to show how a client copes.
//
// Like a daemon with several --uri sources, it can serve several
// documents, each under a selector (SetSource): a request whose selector
// (the Flagd-Selector header, or the request's older selector field)
// names one gets that one. It can serve TLS (NewTLS).
//
// It speaks the protocol only: it neither parses nor checks what it
// serves, so a test can hand clients a document a real daemon would have
// refused.
package flagdtest

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"

	"buf.build/gen/go/open-feature/flagd/grpc/go/flagd/sync/v1/syncv1grpc"
	syncv1 "buf.build/gen/go/open-feature/flagd/protocolbuffers/go/flagd/sync/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Server is a running (or stopped) sync server. Safe for concurrent use.
type Server struct {
	t    testing.TB
	addr string
	tls  *tls.Config // nil: plaintext

	mu        sync.Mutex
	doc       string
	sources   map[string]string // selector -> document (SetSource)
	selectors []string          // the selector of every request, in order
	changed   chan struct{}     // closed and replaced at every Set
	drop      chan struct{}     // closed and replaced at every Drop
	grpc      *grpc.Server      // nil while stopped
	streams   int               // open SyncFlags streams
}

// New starts a server on 127.0.0.1 (a free port) serving doc, and stops
// it when the test ends.
func New(t testing.TB, doc string) *Server {
	t.Helper()
	return NewTLS(t, doc, nil)
}

// NewTLS is New serving TLS with config (nil: plaintext, as New).
func NewTLS(t testing.TB, doc string, config *tls.Config) *Server {
	t.Helper()
	s := &Server{t: t, doc: doc, tls: config, sources: map[string]string{}, changed: make(chan struct{}), drop: make(chan struct{})}
	s.listen("127.0.0.1:0")
	t.Cleanup(s.Stop)
	return s
}

// SetSource serves doc to requests whose selector is selector, from now
// on (open streams with that selector are sent it at once). Requests
// without a selector keep getting the document of Set; one with a
// selector no SetSource named is refused (NotFound).
func (s *Server) SetSource(selector, doc string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sources[selector] = doc
	close(s.changed)
	s.changed = make(chan struct{})
}

// Selectors lists the selector of every request so far, in order ("" for
// none).
func (s *Server) Selectors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.selectors...)
}

// selected is the selector a request carries: the Flagd-Selector header,
// else the request's field (what older clients send).
func selected(ctx context.Context, field string) string {
	if v := metadata.ValueFromIncomingContext(ctx, "flagd-selector"); len(v) > 0 {
		return v[0]
	}
	return field
}

// docFor is the document for selector, recording the request; s.mu held.
func (s *Server) docFor(selector string) (string, error) {
	if selector == "" {
		return s.doc, nil
	}
	doc, ok := s.sources[selector]
	if !ok {
		return "", status.Errorf(codes.NotFound, "flagdtest: no source for selector %q", selector)
	}
	return doc, nil
}

// Addr is the server's address (host:port); it stays the same across
// Stop and Start.
func (s *Server) Addr() string { return s.addr }

// Set replaces the document: every open stream is sent it at once, and
// every later stream and FetchAllFlags answers it.
func (s *Server) Set(doc string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doc = doc
	close(s.changed)
	s.changed = make(chan struct{})
}

// Drop ends every open stream with an Unavailable error, the server
// staying up: clients must open a new one.
func (s *Server) Drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.drop)
	s.drop = make(chan struct{})
}

// Streams is the number of SyncFlags streams open now.
func (s *Server) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams
}

// Stop stops the server: every connection is closed and the address
// refuses new ones until Start. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	g := s.grpc
	s.grpc = nil
	s.mu.Unlock()
	if g != nil {
		g.Stop()
	}
}

// Start serves again on the same address, the document as last Set.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	running := s.grpc != nil
	s.mu.Unlock()
	if !running {
		s.listen(s.addr)
	}
}

func (s *Server) listen(addr string) {
	s.t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		s.t.Fatalf("flagdtest: listen on %s: %v", addr, err)
	}
	var opts []grpc.ServerOption
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls)))
	}
	g := grpc.NewServer(opts...)
	syncv1grpc.RegisterFlagSyncServiceServer(g, service{s})
	s.mu.Lock()
	s.addr, s.grpc = l.Addr().String(), g
	s.mu.Unlock()
	go func() { _ = g.Serve(l) }()
}

// service is the FlagSyncService on a Server.
type service struct{ s *Server }

var _ syncv1grpc.FlagSyncServiceServer = service{}

// SyncFlags sends the document at once and again at every Set, until the
// client goes, the server stops, or Drop.
func (v service) SyncFlags(req *syncv1.SyncFlagsRequest, stream grpc.ServerStreamingServer[syncv1.SyncFlagsResponse]) error {
	s := v.s
	//lint:ignore SA1019 older clients send the selector in the field
	sel := selected(stream.Context(), req.GetSelector())
	s.mu.Lock()
	s.selectors = append(s.selectors, sel)
	s.streams++
	drop := s.drop
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.streams--
		s.mu.Unlock()
	}()
	for {
		s.mu.Lock()
		doc, err := s.docFor(sel)
		changed := s.changed
		s.mu.Unlock()
		if err != nil {
			return err
		}
		if err := stream.Send(&syncv1.SyncFlagsResponse{FlagConfiguration: doc}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-drop:
			return status.Error(codes.Unavailable, "flagdtest: stream dropped")
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// FetchAllFlags answers the document.
func (v service) FetchAllFlags(ctx context.Context, req *syncv1.FetchAllFlagsRequest) (*syncv1.FetchAllFlagsResponse, error) {
	//lint:ignore SA1019 older clients send the selector in the field
	sel := selected(ctx, req.GetSelector())
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	v.s.selectors = append(v.s.selectors, sel)
	doc, err := v.s.docFor(sel)
	if err != nil {
		return nil, err
	}
	return &syncv1.FetchAllFlagsResponse{FlagConfiguration: doc}, nil
}

// GetMetadata is deprecated in the protocol and not served.
//
//lint:ignore SA1019 the generated server interface still requires the method
func (service) GetMetadata(context.Context, *syncv1.GetMetadataRequest) (*syncv1.GetMetadataResponse, error) {
	return nil, status.Error(codes.Unimplemented, "flagdtest: GetMetadata is not served")
}
