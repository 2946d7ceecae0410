package flagsource

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/open-feature/go-sdk-contrib/providers/ofrep"
	"github.com/open-feature/go-sdk/openfeature"

	"github.com/seed31b0e981/reservoir/internal/tlsclient"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// OFREPConfig configures NewOFREPProvider.
type OFREPConfig struct {
	// URL is the OFREP service's base URL (http or https); each
	// evaluation is a POST to URL/ofrep/v1/evaluate/flags/<key>.
	// Required.
	URL string
	// Token, when set, is sent as "Authorization: Bearer <Token>".
	Token string
	// CAFile is a CA file (PEM) to verify an https service against.
	// Empty: the system's roots.
	CAFile string
	// Timeout bounds each evaluation's request (the facade call waits for
	// it). Default: 2s.
	Timeout time.Duration
}

// NewOFREPProvider returns the OpenFeature OFREP provider (go-sdk-contrib
// providers/ofrep) for cfg, for Config.Provider, with one addition: it is
// ready only once the service has answered. The OFREP provider itself has
// no start-up: it would report ready at once, and a replica whose service
// is unreachable or refuses its token would be ready while failing every
// call. Here its start asks the service for the kill switch (an answer,
// or "no such flag", is an answer; a refused connection, a 401 or a 5xx is
// not) and, until one comes, reports not ready and keeps asking, backing
// off to every 2s, reporting ready (a PROVIDER_READY event) at the first
// answer. After that each evaluation stands alone: one that fails fails
// its call.
//
// The provider has no cache and no poll: every evaluation is a request,
// two per facade call, so a change is seen at the next call.
func NewOFREPProvider(cfg OFREPConfig) (openfeature.FeatureProvider, error) {
	if cfg.URL == "" {
		return nil, errors.New("rollout: OFREPConfig.URL is required")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	tc, err := tlsclient.Config(cfg.CAFile, "")
	if err != nil {
		return nil, fmt.Errorf("rollout: OFREPConfig.CAFile: %w", err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tc
	opts := []ofrep.Option{ofrep.WithClient(&http.Client{Transport: transport, Timeout: cfg.Timeout})}
	if cfg.Token != "" {
		opts = append(opts, ofrep.WithBearerToken(cfg.Token))
	}
	return &probed{FeatureProvider: ofrep.NewProvider(cfg.URL, opts...), url: cfg.URL, timeout: cfg.Timeout,
		events: make(chan openfeature.Event, 1), stop: make(chan struct{})}, nil
}

// probed is a provider that is ready once a probe evaluation answered.
type probed struct {
	openfeature.FeatureProvider
	url     string
	timeout time.Duration
	events  chan openfeature.Event

	stopOnce sync.Once
	stop     chan struct{}
	wg       sync.WaitGroup
}

var (
	_ openfeature.StateHandler = (*probed)(nil)
	_ openfeature.EventHandler = (*probed)(nil)
)

// Metadata names the service, so logs say which one.
func (p *probed) Metadata() openfeature.Metadata {
	return openfeature.Metadata{Name: "OFREP " + p.url}
}

// probe asks the service for the kill switch with a neutral context.
func (p *probed) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	d := p.StringEvaluation(ctx, flagdoc.FlagKillSwitch, "off", openfeature.FlattenedContext{
		openfeature.TargetingKey: "0", "pod": "", "shop": 0})
	if err := d.Error(); err != nil && d.ResolutionDetail().ErrorCode != openfeature.FlagNotFoundCode {
		return fmt.Errorf("OFREP service %s: %w", p.url, err)
	}
	return nil
}

// Init probes once; when the service does not answer it reports the error
// (the source is not loaded) and keeps probing in the background until
// it does, then reports ready.
func (p *probed) Init(openfeature.EvaluationContext) error {
	err := p.probe()
	if err == nil {
		return nil
	}
	p.wg.Go(func() {
		wait := grpcRetryMin
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(wait/2 + rand.N(wait/2+1)):
			}
			perr := p.probe()
			if perr == nil {
				select {
				case p.events <- openfeature.Event{ProviderName: p.Metadata().Name, EventType: openfeature.ProviderReady,
					ProviderEventDetails: openfeature.ProviderEventDetails{Message: "the OFREP service answers"}}:
				case <-p.stop:
				}
				return
			}
			wait = min(2*wait, grpcRetryMax)
		}
	})
	return err
}

// Shutdown stops probing.
func (p *probed) Shutdown() {
	p.stopOnce.Do(func() { close(p.stop) })
	p.wg.Wait()
}

// EventChannel carries the PROVIDER_READY of a late first answer.
func (p *probed) EventChannel() <-chan openfeature.Event { return p.events }
