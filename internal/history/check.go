package history

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// EnvArtifacts names the directory failing histories are written to. When
// unset, tests use a temporary directory (see ArtifactDir).
const EnvArtifacts = "RESERVOIR_ARTIFACTS"

// ArtifactDir returns where a test writes its history artifacts:
// $RESERVOIR_ARTIFACTS/<test name> when the variable is set (CI uploads
// it), else a temporary directory of the test.
func ArtifactDir(tb testing.TB) string {
	tb.Helper()
	base := os.Getenv(EnvArtifacts)
	if base == "" {
		return tb.TempDir()
	}
	dir := filepath.Join(base, unsafeChars.ReplaceAllString(tb.Name(), "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("artifacts: %v", err)
	}
	return dir
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// CheckOptions qualify a check.
type CheckOptions struct {
	// Dir receives the artifacts. Required when artifacts are written.
	Dir string
	// Name starts the artifacts' file names. Default: "history".
	Name string
	// Timeout bounds the search of each item (linearizability checking
	// is NP-hard): past it the item's result is porcupine.Unknown.
	// Default: 60s.
	Timeout time.Duration
	// Always writes the artifacts even when the history is linearizable.
	Always bool
}

// Result is what a check found.
type Result struct {
	// Outcome is porcupine's verdict: Ok, Illegal (some item's history is
	// not linearizable) or Unknown (an item's check timed out, none
	// failed).
	Outcome porcupine.CheckResult
	// Ops is the number of operations checked (one per item of a call,
	// the stock operations included); Unknown of them had no answer.
	Ops, Unknown int
	// Partitions is the number of items; Failed lists those whose history
	// is not linearizable.
	Partitions int
	Failed     []Part
	// Took is how long the check ran.
	Took time.Duration
	// HTML and JSON are the artifacts' paths, when written: porcupine's
	// visualization of the failing items, and every entry as recorded.
	HTML, JSON string
}

func (r Result) String() string {
	s := fmt.Sprintf("%s: %d ops (%d unknown) on %d items, checked in %s", r.Outcome, r.Ops, r.Unknown, r.Partitions, r.Took.Round(time.Millisecond))
	for i, k := range r.Failed {
		if i == 0 {
			s += "; not linearizable: "
		} else {
			s += ", "
		}
		s += k.String()
	}
	if r.HTML != "" {
		s += fmt.Sprintf("; history in %s and %s", r.HTML, r.JSON)
	}
	return s
}

// Check checks entries against Model, item by item. It writes the
// artifacts when an item's history is not linearizable or could not be
// checked in time, or when o.Always is set.
//
// Each item is first checked without porcupine's linearization details,
// which stops at the first contradiction; only the failing items are then
// checked again with them, for the visualization. (Asking for details on
// every item makes a failing check wait for the slowest item's full
// search.)
func Check(entries []Entry, o CheckOptions) (Result, error) {
	if o.Name == "" {
		o.Name = "history"
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	model := Model()
	byPart := map[Part][]Entry{}
	for _, e := range entries {
		byPart[e.Input.Part] = append(byPart[e.Input.Part], e)
	}
	res := Result{Ops: len(entries), Partitions: len(byPart), Outcome: porcupine.Ok}
	for _, e := range entries {
		if e.Output.Unknown {
			res.Unknown++
		}
	}
	start := time.Now()
	var show []porcupine.Operation
	for _, k := range slices.SortedFunc(maps.Keys(byPart), comparePart) {
		ops := Operations(byPart[k])
		switch porcupine.CheckOperationsTimeout(model, ops, o.Timeout) {
		case porcupine.Illegal:
			res.Outcome = porcupine.Illegal
			res.Failed = append(res.Failed, k)
			show = append(show, ops...)
		case porcupine.Unknown:
			if res.Outcome == porcupine.Ok {
				res.Outcome = porcupine.Unknown
			}
			show = append(show, ops...)
		}
	}
	res.Took = time.Since(start)
	if res.Outcome == porcupine.Ok && !o.Always {
		return res, nil
	}
	if o.Dir == "" {
		return res, fmt.Errorf("history: %s history and no artifact directory", res.Outcome)
	}
	if show == nil {
		show = Operations(entries)
	}
	_, info := porcupine.CheckOperationsVerbose(model, show, o.Timeout)
	res.HTML = filepath.Join(o.Dir, o.Name+".html")
	res.JSON = filepath.Join(o.Dir, o.Name+".json")
	if err := porcupine.VisualizePath(model, info, res.HTML); err != nil {
		return res, fmt.Errorf("history: write %s: %w", res.HTML, err)
	}
	doc, err := json.MarshalIndent(struct {
		Outcome porcupine.CheckResult `json:"outcome"`
		Failed  []Part                `json:"failed,omitempty"`
		Entries []Entry               `json:"entries"`
	}{res.Outcome, res.Failed, entries}, "", " ")
	if err != nil {
		return res, err
	}
	if err := os.WriteFile(res.JSON, doc, 0o644); err != nil {
		return res, fmt.Errorf("history: write %s: %w", res.JSON, err)
	}
	return res, nil
}

// ReadEntries reads the entries of a JSON artifact Check wrote, so a
// failing history can be checked again, or kept as a regression case.
func ReadEntries(path string) ([]Entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Entries []Entry `json:"entries"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("history: %s: %w", path, err)
	}
	return doc.Entries, nil
}
