package flagsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/open-feature/go-sdk/openfeature"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// The kill switch that wins over a source reservoir does not write.
//
// A flagd daemon or any OpenFeature provider steers the modes, but the
// emergency toggle must not depend on it: reservoir keeps its own kill
// switch document in the control database (flagdoc.KillTable, written by
// `reservoir rollout kill`, the admin API and the automatic controller)
// and a Source with Config.Kills follows it beside the provider. Each
// decision takes the stronger of the two kill switches, and its Version is
// the epoch of both versions (Epoch), so a kill, a release and every
// change the provider makes each move the epoch forward, on every replica
// alike: the fences order the handoffs a kill causes exactly as they order
// those of a flags document (docs/ownership.md section 2).

// MaxProviderVersion is the highest version a provider may answer beside a
// kill switch document (flagdoc.MaxProviderVersion).
const MaxProviderVersion = flagdoc.MaxProviderVersion

// ErrEpochOverflow is wrapped by Epoch's error for a version it cannot
// hold (flagdoc.ErrEpochOverflow).
var ErrEpochOverflow = flagdoc.ErrEpochOverflow

// Epoch is the handoff epoch of a decision whose mode comes from a
// provider at version provider and whose kill switch document is at
// version kill (flagdoc.Epoch, which says how it is ordered).
func Epoch(provider, kill int64) (int64, error) { return flagdoc.Epoch(provider, kill) }

// withKills applies the kill switch document to d, the provider's
// decision for (pod, shop): the stronger kill switch wins, and the
// version becomes the epoch of both.
func (s *Source) withKills(ctx context.Context, d authority.Decision, ec openfeature.EvaluationContext, pod string, shop int64) (authority.Decision, error) {
	if !s.kills.loaded() {
		s.problem("kills/not-loaded", slog.LevelError, "rollout: the kill switch document is not loaded; no decision until it is")
		return authority.RedisSafe, fmt.Errorf("rollout: the kill switch document: %w", ErrFlagsNotLoaded)
	}
	k, err := s.kills.killAt(ctx, ec, pod, shop)
	if err != nil {
		return authority.RedisSafe, err
	}
	if k.Strength() > d.Kill.Strength() {
		d.Kill = k.Kill
	}
	epoch, err := Epoch(d.Version, k.version)
	if err != nil {
		s.problem("epoch", slog.LevelError, "rollout: no epoch for the decision", "pod", pod, "shop", shop, "err", err)
		return authority.RedisSafe, err
	}
	d.Version = epoch
	return d, nil
}

// killState is a kill switch and the version of the document it came from.
type killState struct {
	authority.Kill
	version int64
}

// killAt evaluates the kill switch document's switch for (pod, shop). A
// document not written yet has no flag: no switch, at version 0.
func (s *Source) killAt(ctx context.Context, ec openfeature.EvaluationContext, pod string, shop int64) (killState, error) {
	det, err := s.client.StringValueDetails(ctx, flagdoc.FlagKillSwitch, string(authority.KillOff), ec)
	if err != nil && det.ErrorCode == openfeature.FlagNotFoundCode {
		return killState{Kill: authority.KillOff}, nil
	}
	if err != nil {
		s.problem("kills/"+string(det.ErrorCode), slog.LevelError, "rollout: kill switch evaluation failed; no decision", "pod", pod, "shop", shop, "err", err)
		return killState{}, fmt.Errorf("rollout: evaluate the kill switch document for pod %s shop %d: %w", pod, shop, err)
	}
	v, err := flagdoc.VersionOf(det.FlagMetadata[flagdoc.MetaVersion])
	if err != nil {
		return killState{}, fmt.Errorf("rollout: the kill switch document for pod %s shop %d: metadata.version: %w", pod, shop, err)
	}
	k := authority.Kill(det.Value)
	if !k.Valid() {
		return killState{}, s.unknown(flagdoc.FlagKillSwitch, det.Value, names(authority.Kills), pod, shop)
	}
	return killState{Kill: k, version: v}, nil
}

// rootContext is the evaluation context of no pod and no shop, for the
// version a source answers with.
func rootContext() openfeature.EvaluationContext {
	return openfeature.NewEvaluationContext("0", map[string]any{"pod": "", "shop": 0})
}

// ErrKillDocument is wrapped by ReadError's and Rejected's errors when
// they are the kill switch document's (Config.Kills), not the source's.
var ErrKillDocument = errors.New("the kill switch document in the control database")

// killsReadError is the kill switch document's ReadError, named.
func (s *Source) killsReadError() error {
	if s.kills == nil {
		return nil
	}
	if err := s.kills.ReadError(); err != nil {
		return fmt.Errorf("%w: %w", ErrKillDocument, err)
	}
	return nil
}

// killsRejected is the kill switch document's Rejected, named.
func (s *Source) killsRejected() (time.Time, error) {
	if s.kills == nil {
		return time.Time{}, nil
	}
	at, err := s.kills.Rejected()
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrKillDocument, err)
	}
	return at, err
}

// shopKey is the targeting key of a shop.
func shopKey(shop int64) string { return strconv.FormatInt(shop, 10) }

// WithoutKills is the source as its own flags answer, without the kill
// switch document of Config.Kills (the source itself with none): what the
// daemon or provider says of the modes, for the controller's checks of a
// kill switch change (rollout.ControllerConfig.Modes). Its decisions carry
// the provider's own version, not an epoch: they must not reach a facade.
func (s *Source) WithoutKills() authority.ModeSource {
	if s.kills == nil {
		return s
	}
	return ownDecisions{s}
}

// ownDecisions is WithoutKills' ModeSource.
type ownDecisions struct{ s *Source }

// Decide implements authority.ModeSource.
func (o ownDecisions) Decide(ctx context.Context, pod string, shop int64) (authority.Decision, error) {
	if !o.s.Loaded() {
		return authority.RedisSafe, ErrFlagsNotLoaded
	}
	ec := openfeature.NewEvaluationContext(shopKey(shop), map[string]any{"pod": pod, "shop": shop})
	return o.s.decideOwn(ctx, ec, pod, shop)
}
