package flagsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"buf.build/gen/go/open-feature/flagd/grpc/go/flagd/sync/v1/syncv1grpc"
	syncv1 "buf.build/gen/go/open-feature/flagd/protocolbuffers/go/flagd/sync/v1"
	isync "github.com/open-feature/flagd/core/pkg/sync"
	"github.com/seed31b0e981/reservoir/internal/netaddr"
	"github.com/seed31b0e981/reservoir/internal/tlsclient"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// The flagd sync stream's reconnect backoff: the first retry comes soon (a
// daemon restart is usually over in a second), later ones at most
// grpcRetryMax apart, each with jitter so a fleet does not reconnect in
// step.
const (
	grpcRetryMin = 50 * time.Millisecond
	grpcRetryMax = 2 * time.Second
)

// CheckFlagdAddr reports whether addr can name a flagd daemon's sync
// service for Config.FlagdAddr (and the topology's flagd_addr):
// host:port, without a scheme (TLS is Config.FlagdTLS's, not a scheme's).
func CheckFlagdAddr(addr string) error { return netaddr.HostPort(addr) }

// grpcFeed feeds the flags a flagd daemon serves over its gRPC sync
// protocol (flagd.sync.v1.FlagSyncService) to flagd's in-process provider,
// as fileFeed feeds a file: the daemon is the fleet's one reader of the
// flags (a file, an HTTP URL, a Kubernetes resource, as the daemon is set
// up), and every replica holds a SyncFlags stream to it, on which the
// daemon pushes the whole document at connect and at every change.
//
// flagd core's grpc sync client (core/pkg/sync/grpc) is not reused: it
// passes every document on unchecked, gives up when the first connection
// fails, and backs off 4 s, 16 s, then 60 s between reconnects, where a
// kill switch must reach a replica in moments. This client is the part of
// it reservoir needs: plaintext or TLS, an optional selector, the
// daemon's SyncContext ignored (reservoir's evaluation context is its
// own).
//
// Each document is checked with flagd's own parser and for flags that
// agree on a metadata.version above the one in force (flagdoc.Evaluator.Check) before
// it is passed on, so the provider always holds the last valid one; a
// stream that breaks, or a daemon that is down, leaves it in effect while
// the feed reconnects with backoff. The feed is not loaded until the
// first valid document arrives.
type grpcFeed struct {
	syncReady
	addr     string
	selector string
	creds    credentials.TransportCredentials
	timeout  time.Duration
	log      *slog.Logger
	problem  func(key string, level slog.Level, msg string, args ...any)
	check    *flagdoc.Evaluator

	loaded atomic.Bool
	// broken is set when a stream that delivered broke, until a new one
	// delivers (Sync's goroutine only).
	broken bool

	mu       sync.Mutex
	current  []byte // the document in effect (noFlags before any)
	version  int64  // current's metadata.version (0 before any); only grows
	rejected []byte // the last document refused (nil: none)

	// rej is the refusal Source.Rejected reports.
	rej rejection
	// readFail is the read failure Source.ReadError reports.
	readFail readFailure
}

var _ feed = (*grpcFeed)(nil)

// newGRPCFeed makes the feed of cfg's daemon. It fails only for a CA file
// that cannot be read: a replica that cannot verify the daemon must not
// start as if it could.
func newGRPCFeed(cfg Config, log *slog.Logger, problem func(key string, level slog.Level, msg string, args ...any)) (*grpcFeed, error) {
	creds := insecure.NewCredentials()
	if cfg.FlagdTLS {
		tc, err := tlsclient.Config(cfg.FlagdCAFile, "")
		if err != nil {
			return nil, fmt.Errorf("rollout: Config.FlagdCAFile: %w", err)
		}
		creds = credentials.NewTLS(tc)
	}
	f := &grpcFeed{addr: cfg.FlagdAddr, selector: cfg.FlagdSelector, creds: creds, timeout: cfg.LoadTimeout,
		log: log, problem: problem, current: []byte(noFlags)}
	f.check = flagdoc.NewEvaluator(f.source())
	return f, nil
}

func (f *grpcFeed) isLoaded() bool { return f.loaded.Load() }

// source names the daemon the way flagd names a gRPC sync source
// (grpcs:// over TLS), with the selector after a '#' when there is one:
// it names the daemon in logs and keys flagd's in-process state.
func (f *grpcFeed) source() string {
	s := "grpc://" + f.addr
	if f.creds.Info().SecurityProtocol == "tls" {
		s = "grpcs://" + f.addr
	}
	if f.selector != "" {
		s += "#" + f.selector
	}
	return s
}

// dial makes a client for the daemon. The connection itself is made on
// first use; its own reconnect backoff is capped like the stream's, so a
// restarted daemon is found within grpcRetryMax.
func (f *grpcFeed) dial() (*grpc.ClientConn, syncv1grpc.FlagSyncServiceClient, error) {
	conn, err := grpc.NewClient(f.addr,
		grpc.WithTransportCredentials(f.creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: grpcRetryMin, Multiplier: 2, Jitter: 0.2, MaxDelay: grpcRetryMax},
			MinConnectTimeout: f.timeout,
		}))
	if err != nil {
		return nil, nil, fmt.Errorf("rollout: flagd sync client for %s: %w", f.addr, err)
	}
	return conn, syncv1grpc.NewFlagSyncServiceClient(conn), nil
}

// selectorHeader is the gRPC metadata key flagd reads the selector from
// (it replaced the requests' deprecated selector field).
const selectorHeader = "flagd-selector"

// selecting is ctx carrying the selector as the Flagd-Selector header,
// when there is one. The request's own selector field is set too: a
// daemon reads one or the other, by its version.
func (f *grpcFeed) selecting(ctx context.Context) context.Context {
	if f.selector == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, selectorHeader, f.selector)
}

// prime asks the daemon for its document once (FetchAllFlags, bounded by
// the load timeout) before the provider starts, so the provider's first
// version is the daemon's when it answers. A daemon that is down or does
// not answer is not an error here: Sync keeps trying.
func (f *grpcFeed) prime() {
	conn, client, err := f.dial()
	if err != nil {
		f.readFail.set(err)
		f.log.Error("rollout: flags cannot be read from the flagd daemon; no decisions until they can (retrying)", "err", err)
		return
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	req := &syncv1.FetchAllFlagsRequest{}
	//lint:ignore SA1019 daemons before the Flagd-Selector header read only the field; newer ones read both
	req.Selector = f.selector
	res, err := client.FetchAllFlags(f.selecting(ctx), req)
	f.readFail.set(err)
	if err != nil {
		f.log.Error("rollout: flags cannot be read from the flagd daemon; no decisions until they can (retrying)", "err", err)
		return
	}
	f.accept([]byte(res.GetFlagConfiguration()))
}

// ReSync implements sync.ISync: it sends the document in effect again.
func (f *grpcFeed) ReSync(ctx context.Context, out chan<- isync.DataSync) error {
	f.mu.Lock()
	data := f.current
	f.mu.Unlock()
	sendFlags(ctx, out, f.source(), data)
	return nil
}

// Sync implements sync.ISync: the document in effect, then every new valid
// one the daemon pushes, until ctx ends (the provider's shutdown). A
// stream that cannot be opened or breaks is opened again after a backoff
// that starts at grpcRetryMin and doubles up to grpcRetryMax; one that
// delivered a document starts the backoff over.
func (f *grpcFeed) Sync(ctx context.Context, out chan<- isync.DataSync) error {
	if err := f.ReSync(ctx, out); err != nil {
		return err
	}
	conn, client, err := f.dial()
	if err != nil {
		// Only for a target grpc cannot parse, which Validate refuses.
		f.log.Error("rollout: no flagd sync client; keeping the flags in effect", "err", err)
		<-ctx.Done()
		return nil
	}
	defer conn.Close()
	wait := grpcRetryMin
	for {
		received, err := f.stream(ctx, client, out)
		if ctx.Err() != nil {
			return nil
		}
		f.readFail.set(err)
		// A stream that delivered and broke is logged each time (once per
		// connection); failing to open one again only now and then.
		switch loaded := f.loaded.Load(); {
		case received && loaded:
			f.log.Warn("rollout: flagd sync stream broke; keeping the last valid flags (reconnecting)", "addr", f.addr, "err", err)
		case received:
			f.log.Error("rollout: flagd sync stream broke; no decisions until a valid document arrives (reconnecting)", "addr", f.addr, "err", err)
		case loaded:
			f.problem("feed/flagd", slog.LevelWarn, "rollout: cannot reach the flagd daemon; keeping the last valid flags (retrying)", "addr", f.addr, "err", err)
		default:
			f.problem("feed/flagd", slog.LevelError, "rollout: flags cannot be read from the flagd daemon; no decisions until they can (retrying)", "addr", f.addr, "err", err)
		}
		if received {
			wait = grpcRetryMin
			f.broken = true
		}
		// Full jitter over the upper half: never a hot loop, never in step.
		sleep := wait/2 + rand.N(wait/2+1)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(sleep):
		}
		wait = min(2*wait, grpcRetryMax)
	}
}

// stream opens one SyncFlags stream and passes every valid document on
// until it breaks; it says whether it received any message.
func (f *grpcFeed) stream(ctx context.Context, client syncv1grpc.FlagSyncServiceClient, out chan<- isync.DataSync) (received bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := &syncv1.SyncFlagsRequest{}
	//lint:ignore SA1019 daemons before the Flagd-Selector header read only the field; newer ones read both
	req.Selector = f.selector
	st, err := client.SyncFlags(f.selecting(sctx), req)
	if err != nil {
		return false, err
	}
	for {
		msg, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return received, errors.New("the daemon ended the stream")
		}
		if err != nil {
			return received, err
		}
		if !received && f.broken {
			f.broken = false
			f.log.Info("rollout: flagd sync stream open again", "addr", f.addr)
		}
		received = true
		if data := f.accept([]byte(msg.GetFlagConfiguration())); data != nil {
			sendFlags(ctx, out, f.source(), data)
		}
	}
}

// accept checks a document from the daemon and, if it is new and valid,
// makes it current and returns it (nil: nothing to pass on). A document
// refused is logged once, however often the daemon sends it again (it
// does at every reconnect).
func (f *grpcFeed) accept(data []byte) []byte {
	f.readFail.set(nil) // a document arrived
	f.mu.Lock()
	if bytes.Equal(data, f.current) && f.rejected != nil {
		// Put back as it was: the version in force is the newest again.
		f.rejected = nil
		f.rej.accept()
	}
	if bytes.Equal(data, f.current) || (f.rejected != nil && bytes.Equal(data, f.rejected)) {
		f.mu.Unlock()
		return nil
	}
	version, err := f.check.Check(data, f.version)
	if err != nil {
		f.rejected = append([]byte{}, data...) // never nil: an empty document is refused once
		f.rej.reject(f.log, "flags document from the flagd daemon", f.loaded.Load(), err, "addr", f.addr)
		f.mu.Unlock()
		return nil
	}
	f.current, f.version, f.rejected = data, version, nil
	f.rej.accept()
	f.mu.Unlock()

	if !f.loaded.Swap(true) {
		f.log.Info("rollout: flags loaded from the flagd daemon", "addr", f.addr, "bytes", len(data), "version", version)
		return data
	}
	f.log.Info("rollout: flags reloaded from the flagd daemon", "addr", f.addr, "bytes", len(data), "version", version)
	return data
}
