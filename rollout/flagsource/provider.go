package flagsource

import (
	"context"
	"fmt"

	"github.com/open-feature/go-sdk/openfeature"
	"github.com/open-feature/go-sdk/openfeature/isolated"
)

// startProvider starts a Source on Config.Provider: no feed
// and no document check, the provider evaluates the flags itself. A
// provider that fails to start, or is not ready within LoadTimeout, does
// not fail the source (as a flags file missing at start does not): the
// source is not loaded until the provider reports ready. Only ctx ending
// first fails it.
func (s *Source) startProvider(ctx context.Context) (*Source, error) {
	cfg := s.cfg
	name := cfg.Provider.Metadata().Name
	s.log = cfg.Logger.With("flags", "provider "+name)
	s.api = isolated.NewAPI()
	ready := func(openfeature.EventDetails) { s.wasReady.Store(true) }
	s.api.AddHandler(openfeature.ProviderReady, &ready)
	failed := func(d openfeature.EventDetails) {
		s.log.Error("rollout: the flags provider reports an error", "err", d.Message, "code", d.ErrorCode)
	}
	s.api.AddHandler(openfeature.ProviderError, &failed)
	lctx, cancel := context.WithTimeout(ctx, cfg.LoadTimeout)
	defer cancel()
	err := s.api.SetProviderAndWait(lctx, cfg.Provider)
	s.client = s.api.NewClient()
	switch {
	case ctx.Err() != nil:
		if serr := s.shutdown(); serr != nil {
			s.log.Warn("rollout: flags provider did not shut down", "err", serr)
		}
		return nil, fmt.Errorf("rollout: start flags provider %s: %w", name, ctx.Err())
	case err != nil:
		s.log.Error("rollout: the flags provider is not ready; no decisions until it is", "err", err)
	default:
		s.wasReady.Store(true)
		s.log.Info("rollout: flags provider ready")
	}
	return s, nil
}

// loaded is Loaded without Close: the feed's word, or with a Provider its
// state.
func (s *Source) loaded() bool {
	if s.feed != nil {
		return s.feed.isLoaded()
	}
	return s.providerLoaded()
}

// providerLoaded says whether a Provider can be asked: READY, or STALE (it
// answers from flags it holds but could not refresh, as a feed keeps its
// last valid version), or ERROR after it was once ready (a provider that
// refused a new version, like flagd, keeps answering the previous one; if
// it cannot answer at all, each Decide fails on its own). NOT_READY and
// FATAL cannot answer.
func (s *Source) providerLoaded() bool {
	if s.client == nil {
		return false
	}
	switch s.client.State() {
	case openfeature.ReadyState, openfeature.StaleState:
		return true
	case openfeature.ErrorState:
		return s.wasReady.Load()
	default:
		return false
	}
}
