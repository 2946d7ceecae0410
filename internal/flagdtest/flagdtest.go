// Package flagdtest is a flagd sync server for tests: a real gRPC server on
// 127.0.0.1 implementing flagd's flagd.sync.v1.FlagSyncService, serving one
// flags document that the test replaces at will, as a flagd daemon serves
// the flags it reads. A test can also break every open stream, and stop
// and restart the server on the same address, to show how a client copes.
//
// It speaks the protocol only: it neither parses nor checks what it
// serves, so a test can hand clients a document a real daemon would have
// refused.
package flagdtest

import (
	"context"
	"net"
	"sync"
	"testing"

	"buf.build/gen/go/open-feature/flagd/grpc/go/flagd/sync/v1/syncv1grpc"
	syncv1 "buf.build/gen/go/open-feature/flagd/protocolbuffers/go/flagd/sync/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server is a running (or stopped) sync server. Safe for concurrent use.
type Server struct {
	t    testing.TB
	addr string

	mu      sync.Mutex
	doc     string
	changed chan struct{} // closed and replaced at every Set
	drop    chan struct{} // closed and replaced at every Drop
	grpc    *grpc.Server  // nil while stopped
	streams int           // open SyncFlags streams
}

// New starts a server on 127.0.0.1 (a free port) serving doc, and stops
// it when the test ends.
func New(t testing.TB, doc string) *Server {
	t.Helper()
	s := &Server{t: t, doc: doc, changed: make(chan struct{}), drop: make(chan struct{})}
	s.listen("127.0.0.1:0")
	t.Cleanup(s.Stop)
	return s
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
	g := grpc.NewServer()
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
func (v service) SyncFlags(_ *syncv1.SyncFlagsRequest, stream grpc.ServerStreamingServer[syncv1.SyncFlagsResponse]) error {
	s := v.s
	s.mu.Lock()
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
		doc, changed := s.doc, s.changed
		s.mu.Unlock()
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
func (v service) FetchAllFlags(context.Context, *syncv1.FetchAllFlagsRequest) (*syncv1.FetchAllFlagsResponse, error) {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	return &syncv1.FetchAllFlagsResponse{FlagConfiguration: v.s.doc}, nil
}

// GetMetadata is deprecated in the protocol and not served.
//
//lint:ignore SA1019 the generated server interface still requires the method
func (service) GetMetadata(context.Context, *syncv1.GetMetadataRequest) (*syncv1.GetMetadataResponse, error) {
	return nil, status.Error(codes.Unimplemented, "flagdtest: GetMetadata is not served")
}
