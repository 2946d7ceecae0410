// Package reservoirmain is the reservoir command as a library: a program
// whose main calls Main is the reservoir binary (every command, docs/cli.md),
// and with WithFlagsProvider its serve (and its operator commands) take
// the flags from any Go OpenFeature provider, a vendor's included,
// without a fork. The shipped binary (cmd/reservoir) is
//
//	func main() { os.Exit(reservoirmain.Main(os.Args[1:])) }
//
// so a custom binary runs the very same code, plus its provider.
//
// The topology decides whether the provider is used: flags_source =
// "provider" means "the program supplies it". serve refuses such a
// topology in a program that supplies none (the shipped binary), and a
// program that supplies one refuses a topology naming another source, so
// a replica never reads its flags from somewhere its operator did not
// mean.
//
// What reservoir needs from the provider (two string flags, the same
// metadata.version on both, targeting on the shop and the pod, readiness)
// is in docs/flags.md, "Any OpenFeature provider". reservoir cannot write
// to it: with this source the kill switch is reservoir's own, in the
// control database, and wins over the provider's answers (docs/flags.md,
// "The kill switch beside a source reservoir does not write").
package reservoirmain

import (
	"context"
	"io"

	"github.com/open-feature/go-sdk/openfeature"

	"github.com/seed31b0e981/reservoir/internal/cli"
	"github.com/seed31b0e981/reservoir/internal/topology"
)

// Topology is what a provider function is told of the topology the
// command was given.
type Topology struct {
	// File is the topology file's path, as given (--topology or
	// $RESERVOIR_TOPOLOGY).
	File string
	// Pods are the pods' names, in file order: the values of the "pod"
	// attribute the provider will be asked about.
	Pods []string
}

// ProviderFunc builds the program's OpenFeature provider for a topology
// with flags_source = "provider". It is called once per command that
// opens the pods (serve, rollout, reconcile), after the topology was read
// and before any connection is made; an error stops the command, printed
// after "the program's flags provider: ". The provider is not started
// yet: reservoir starts it (Init) and shuts it down (Shutdown) with the
// flag source, and serves nothing until it reports ready.
type ProviderFunc func(ctx context.Context, t Topology) (openfeature.FeatureProvider, error)

// Option configures Main.
type Option func(*options)

type options struct {
	provider ProviderFunc
}

// WithFlagsProvider makes fn the source of the flags of every topology
// that says flags_source = "provider". A topology naming another source
// is refused, naming the file.
func WithFlagsProvider(fn ProviderFunc) Option {
	return func(o *options) { o.provider = fn }
}

// Main runs the command args names (args without the program's name:
// os.Args[1:]) and returns the process's exit status: 0 success, 1
// failure, 2 bad usage. Ctrl-C and SIGTERM stop it cleanly, as they stop
// the shipped binary.
func Main(args []string, opts ...Option) int {
	return cli.RunContext(withOptions(context.Background(), opts), args)
}

// Run is Main for a program that runs commands itself (a test, or a
// process that embeds serve): ctx ending stops the command as SIGTERM
// would, its output goes to stdout and its errors to stderr, and no
// signal handler is installed.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, opts ...Option) int {
	return cli.Main(withOptions(ctx, opts), args, stdout, stderr)
}

// withOptions returns ctx carrying opts to the commands.
func withOptions(ctx context.Context, opts []Option) context.Context {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.provider == nil {
		return ctx
	}
	fn := o.provider
	return cli.WithFlagsProvider(ctx, func(ctx context.Context, topo *topology.Config, path string) (openfeature.FeatureProvider, error) {
		return fn(ctx, Topology{File: path, Pods: topo.PodNames()})
	})
}
