package flagdoc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/open-feature/flagd/core/pkg/evaluator"
	flagdlog "github.com/open-feature/flagd/core/pkg/logger"
	"github.com/open-feature/flagd/core/pkg/store"
	isync "github.com/open-feature/flagd/core/pkg/sync"

	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// Evaluator is flagd's own in-process evaluator, the one the flagd
// provider evaluates with, holding one flags document at a time. It is the
// only evaluator of the flags in reservoir: the feeds check each document
// with it before passing it to the provider, and Flags.Resolve (status,
// metrics, the kill switch's checks, previews) evaluates through it, so
// what a replica decides and what it says it decides cannot disagree.
// Safe for concurrent use.
type Evaluator struct {
	source string
	json   *evaluator.JSON
}

// NewEvaluator returns an Evaluator with no flags, for documents read
// from source (a file path, "database", a flagd address: flagd keys its
// state by it).
func NewEvaluator(source string) *Evaluator {
	quiet := flagdlog.NewLogger(nil, false)
	s, err := store.NewStore(quiet, []string{source})
	if err != nil {
		// Only fails for a duplicate source name; there is one.
		panic(fmt.Sprintf("rollout: flagd store: %v", err))
	}
	return &Evaluator{source: source, json: evaluator.NewJSON(quiet, s)}
}

// Check runs flagd's own parser over a flags
// document, after reservoir's own check of its flags' variants
// (checkVariants: an unknown variant is a rejected document, and a syntax
// error is told with its line and column), checks that both flags carry
// the same version, and that the version follows CheckVersion's rule
// against inForce, the version of the flags in force (0: none yet); it
// returns the version. Every feed checks each document with it before
// passing it on, after setting aside one byte for byte the same as the
// document in force (no change).
func (e *Evaluator) Check(data []byte, inForce int64) (int64, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return 0, fmt.Errorf("the document is empty")
	}
	if err := checkVariants(data); err != nil {
		return 0, err
	}
	if err := e.json.SetState(isync.DataSync{FlagData: string(data), Source: e.source}); err != nil {
		return 0, err
	}
	version, err := fileVersion(data)
	if err != nil {
		return 0, err
	}
	return version, CheckVersion(version, inForce)
}

// fileVersion returns the metadata.version both flags carry (0 for none,
// which CheckVersion refuses), as FlagSource will read it from their
// evaluations. Flags that disagree (a flag absent from the file carries
// none) are an error: every decision would have two versions.
func fileVersion(data []byte) (int64, error) {
	var doc struct {
		Flags map[string]struct {
			Metadata map[string]any `json:"metadata"`
		} `json:"flags"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return 0, fmt.Errorf("read the flags' metadata: %w", err)
	}
	var versions [2]int64
	for i, key := range []string{FlagMode, FlagKillSwitch} {
		v, err := VersionOf(doc.Flags[key].Metadata[MetaVersion])
		if err != nil {
			return 0, fmt.Errorf("flags[%q].metadata.version: %w", key, err)
		}
		versions[i] = v
	}
	if versions[0] != versions[1] {
		return 0, fmt.Errorf("flags[%q].metadata.version is %s but flags[%q].metadata.version is %s: both flags must carry the same version",
			FlagMode, versionText(versions[0]), FlagKillSwitch, versionText(versions[1]))
	}
	return versions[0], nil
}

// VersionOf reads a metadata.version the way flagd hands it over: a
// float64 from a JSON file, an int or int64 from other sources, a
// json.Number from a decoder set to UseNumber; nil (absent) is 0. Anything
// else, or a number that is not a whole one from 0 to 2^53, is an error.
func VersionOf(v any) (int64, error) {
	var n int64
	switch x := v.(type) {
	case nil:
		return 0, nil
	case float64:
		if x != math.Trunc(x) || x < 0 || x > MaxVersion {
			return 0, fmt.Errorf("%v is not a whole number from 0 to 2^53", x)
		}
		n = int64(x)
	case int:
		n = int64(x)
	case int64:
		n = x
	case json.Number:
		var err error
		if n, err = x.Int64(); err != nil {
			return 0, fmt.Errorf("%s is not a whole number from 0 to 2^53", x)
		}
	default:
		return 0, fmt.Errorf("%v (%T) is not a number", v, v)
	}
	if n < 0 || n > MaxVersion {
		return 0, fmt.Errorf("%d is not a whole number from 0 to 2^53", n)
	}
	return n, nil
}

// Decide evaluates both flags for a shop of a pod with the evaluation
// context a FlagSource gives the provider (the shop id as targeting key,
// the pod and the shop as attributes) and returns the decision they give,
// with the version both carry. A flag the document lacks answers its code
// default, as through the provider.
func (e *Evaluator) Decide(ctx context.Context, pod string, shop int64) (authority.Decision, error) {
	ec := map[string]any{"targetingKey": strconv.FormatInt(shop, 10), "pod": pod, "shop": shop}
	mode, mv, err := e.variant(ctx, FlagMode, string(authority.ModeRedis), ec)
	if err != nil {
		return authority.RedisSafe, err
	}
	kill, kv, err := e.variant(ctx, FlagKillSwitch, string(authority.KillOff), ec)
	if err != nil {
		return authority.RedisSafe, err
	}
	d := authority.Decision{Mode: authority.Mode(mode), Kill: authority.Kill(kill), Version: mv}
	switch {
	case mv != kv:
		return authority.RedisSafe, fmt.Errorf("rollout: %s version %d, %s version %d: both flags must carry the same version", FlagMode, mv, FlagKillSwitch, kv)
	case !d.Mode.Valid():
		return authority.RedisSafe, fmt.Errorf("rollout: flag %s answered unknown variant %q", FlagMode, mode)
	case !d.Kill.Valid():
		return authority.RedisSafe, fmt.Errorf("rollout: flag %s answered unknown variant %q", FlagKillSwitch, kill)
	}
	return d, nil
}

// variant evaluates one string flag: its value and the version it
// carries, or def at version 0 when the document lacks the flag.
func (e *Evaluator) variant(ctx context.Context, key, def string, ec map[string]any) (string, int64, error) {
	value, _, _, meta, err := e.json.ResolveStringValue(ctx, "", key, ec)
	if err != nil {
		if err.Error() == "FLAG_NOT_FOUND" {
			return def, 0, nil
		}
		return "", 0, fmt.Errorf("rollout: evaluate %s: %w", key, err)
	}
	v, err := VersionOf(meta[MetaVersion])
	if err != nil {
		return "", 0, fmt.Errorf("rollout: evaluate %s: metadata.version: %w", key, err)
	}
	return value, v, nil
}

// resolver is the Evaluator Flags.Resolve evaluates through, with the
// document it holds: loading a document costs flagd a schema check, and
// status pages resolve the same flags for every pod.
var resolver struct {
	sync.Mutex
	ev  *Evaluator
	doc []byte
}

// Decide returns the decision the flags give a shop of a pod, version
// included, evaluated by flagd's evaluator from the rendered document:
// the answer a FlagSource holding these flags gives. It fails only for
// flags that do not validate.
func (f *Flags) Decide(pod string, shop int64) (authority.Decision, error) {
	doc, err := f.Render()
	if err != nil {
		return authority.RedisSafe, err
	}
	resolver.Lock()
	defer resolver.Unlock()
	if resolver.ev == nil {
		resolver.ev = NewEvaluator("resolve")
	}
	if !bytes.Equal(doc, resolver.doc) {
		resolver.doc = nil
		if err := resolver.ev.json.SetState(isync.DataSync{FlagData: string(doc), Source: "resolve"}); err != nil {
			return authority.RedisSafe, fmt.Errorf("rollout: flagd refused the rendered flags: %w", err)
		}
		resolver.doc = doc
	}
	return resolver.ev.Decide(context.Background(), pod, shop)
}

// Resolve is Decide for flags known to be valid (read from a store, which
// validates them, or checked with Validate): an invalid state answers
// RedisSafe. Use it to explain a state or preview a change.
func (f *Flags) Resolve(pod string, shop int64) authority.Decision {
	d, err := f.Decide(pod, shop)
	if err != nil {
		return authority.RedisSafe
	}
	return d
}
