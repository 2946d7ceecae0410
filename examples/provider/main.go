// Command provider is reservoir with its flags from a Go OpenFeature
// provider of the program's choosing: the whole reservoir command
// (serve, rollout, reconcile, ...) in a short main, through package
// reservoirmain. Here the provider is the OpenFeature SDK's in-memory one,
// holding every pod in redis mode with the kill switch off at version 1;
// a vendor's provider takes its place the same way, with no fork of
// reservoir.
//
// Its topology says flags_source = "provider":
//
//	control_dsn  = "..."
//	flags_source = "provider"
//	[[pods]]
//	...
//
//	go build -o reservoir-custom ./examples/provider
//	./reservoir-custom serve --topology topology.toml --clients clients.toml
package main

import (
	"context"
	"os"

	"github.com/open-feature/go-sdk/openfeature"
	"github.com/open-feature/go-sdk/openfeature/memprovider"

	"github.com/seed31b0e981/reservoir/reservoirmain"
)

func main() {
	os.Exit(reservoirmain.Main(os.Args[1:], reservoirmain.WithFlagsProvider(flags)))
}

// version is the flags' metadata.version: it must grow with every change
// of the flags, and be the same on both (docs/flags.md).
const version = 1

// flags builds the provider for the topology: reservoir's two string
// flags, each answering its variant with metadata.version.
func flags(_ context.Context, _ reservoirmain.Topology) (openfeature.FeatureProvider, error) {
	flag := func(key, variant string) memprovider.InMemoryFlag {
		eval := func(memprovider.InMemoryFlag, openfeature.FlattenedContext) (any, openfeature.ProviderResolutionDetail) {
			// The context carries the shop id (targeting key), "pod" and
			// "shop": a real provider targets on them.
			return variant, openfeature.ProviderResolutionDetail{Variant: variant, Reason: openfeature.StaticReason,
				FlagMetadata: openfeature.FlagMetadata{"version": version}}
		}
		return memprovider.InMemoryFlag{Key: key, State: memprovider.Enabled, DefaultVariant: variant,
			Variants: map[string]any{variant: variant}, ContextEvaluator: &eval}
	}
	return memprovider.NewInMemoryProvider(map[string]memprovider.InMemoryFlag{
		"reservations.mode":        flag("reservations.mode", "redis"),
		"reservations.kill_switch": flag("reservations.kill_switch", "off"),
	}), nil
}
