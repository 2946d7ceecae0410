package cli

import (
	"context"
	"fmt"

	"github.com/open-feature/go-sdk/openfeature"

	"github.com/seed31b0e981/reservoir/internal/topology"
)

// FlagsProviderFunc builds the OpenFeature provider a program supplies for
// a topology whose flags_source is "provider" (path is the topology
// file's). It is called once per command that opens the pods (serve, and
// the operator commands), after the topology was read; the cell owns what
// it returns.
type FlagsProviderFunc func(ctx context.Context, topo *topology.Config, path string) (openfeature.FeatureProvider, error)

// providerKey carries a FlagsProviderFunc in a context.
type providerKey struct{}

// WithFlagsProvider returns ctx carrying fn to the commands: the way a
// program built on package reservoirmain hands its provider to serve
// without a flag or a global (the command set is shared by every program).
func WithFlagsProvider(ctx context.Context, fn FlagsProviderFunc) context.Context {
	return context.WithValue(ctx, providerKey{}, fn)
}

// flagsProvider is the provider the program supplies for topo, or nil
// when the topology does not ask for one. A program that supplies one
// for a topology naming another flags source is refused: the operator
// would believe the provider decides while the replicas read elsewhere.
// A topology asking for one from a program without one is left to the
// cell, whose refusal says what to do.
func flagsProvider(ctx context.Context, topo *topology.Config, path string) (openfeature.FeatureProvider, error) {
	fn, _ := ctx.Value(providerKey{}).(FlagsProviderFunc)
	switch {
	case fn == nil:
		return nil, nil
	case topo.FlagsSource != topology.FlagsFromProvider:
		return nil, fmt.Errorf(`this program supplies its own OpenFeature provider, but topology %s says flags_source = %q: `+
			`set flags_source = "provider" to use the program's provider, or run the shipped reservoir binary for that source`, path, topo.FlagsSource)
	}
	p, err := fn(ctx, topo, path)
	if err != nil {
		return nil, fmt.Errorf("the program's flags provider: %w", err)
	}
	if p == nil {
		return nil, fmt.Errorf(`the program's flags provider function returned no provider for topology %s (flags_source = "provider")`, path)
	}
	return p, nil
}
