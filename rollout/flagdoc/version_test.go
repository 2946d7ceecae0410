package flagdoc_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc/flagdoctest"
)

// Every version of the flags has a number that only grows, and every
// decision carries the number of the flags it was made from
// (docs/ownership.md section 2). These tests hold each source to it.

// Render writes the version in both flags' metadata as a number, and
// refuses a state without one (version 0) or with a negative one, naming
// the version.
func TestFlagsRenderWritesVersionInBothFlags(t *testing.T) {
	t.Parallel()
	metadata := func(t *testing.T, f *flagdoc.Flags) map[string]map[string]any {
		t.Helper()
		data, err := f.Render()
		must(t, err)
		var doc struct {
			Flags map[string]struct {
				Metadata map[string]any `json:"metadata"`
			} `json:"flags"`
		}
		must(t, json.Unmarshal(data, &doc))
		out := map[string]map[string]any{}
		for k, fl := range doc.Flags {
			out[k] = fl.Metadata
		}
		return out
	}
	for key, meta := range metadata(t, flagdoctest.Rollout(t)) {
		if v, ok := meta["version"].(float64); !ok || v != 41 {
			t.Errorf("%s: metadata.version = %#v, want the number 41", key, meta["version"])
		}
	}
	for key, meta := range metadata(t, flagdoc.NewFlags()) {
		if v, ok := meta["version"].(float64); !ok || v != 1 {
			t.Errorf("%s: NewFlags' metadata.version = %#v, want the number 1 (the first version)", key, meta["version"])
		}
	}
	for _, v := range []int64{0, -1} {
		f := flagdoc.NewFlags()
		f.Version = v
		var fe *flagdoc.FlagsError
		if _, err := f.Render(); !errors.As(err, &fe) || fe.Field != "version" {
			t.Errorf("version %d: %v, want a FlagsError naming version", v, err)
		}
	}
	f := flagdoc.NewFlags()
	f.Version = 0
	if _, err := f.Render(); err == nil || !strings.Contains(err.Error(), causeRequired) {
		t.Errorf("version 0: %v, want it saying %q", err, causeRequired)
	}
}

func TestVersionOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   any
		want int64
		ok   bool
	}{
		{nil, 0, true}, {0.0, 0, true}, {41.0, 41, true}, {41, 41, true}, {int64(41), 41, true},
		{json.Number("41"), 41, true}, {float64(flagdoc.MaxVersion), flagdoc.MaxVersion, true},
		{41.5, 0, false}, {-1.0, 0, false}, {-1, 0, false}, {float64(flagdoc.MaxVersion) * 2, 0, false},
		{json.Number("4.1"), 0, false}, {"41", 0, false}, {true, 0, false},
	} {
		got, err := flagdoc.VersionOf(c.in)
		if got != c.want || (err == nil) != c.ok {
			t.Errorf("flagdoc.VersionOf(%#v) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
