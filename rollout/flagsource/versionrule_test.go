package flagsource

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/rollout/flagdoc"

	"github.com/seed31b0e981/reservoir/rollout/authority"

	"github.com/seed31b0e981/reservoir/internal/flagdtest"
	"github.com/seed31b0e981/reservoir/internal/testdb"
)

// A flags document without metadata.version, or whose version does not
// grow, is refused by every source like any invalid document
// (docs/flags.md, "The version"): a decision at version 0 can never hand a
// shop off, and one at a version that went back is stale to the stores'
// fences, so applying either would leave the flags saying one thing while
// the fences keep doing another. These tests hold the file, the control
// database and the flagd daemon to it, through the same scenarios.

// The causes the refusals name, as the log line and Rejected() say them.
const (
	causeRequired = "metadata.version is required (a positive integer that grows with every change)"
	causeRejected = "rejected; keeping the last valid flags"
)

// docFeed is a Source under test and the way to put a new document
// where it reads its flags.
type docFeed struct {
	src  *Source
	logs *logBuffer
	put  func(t *testing.T, doc string)
}

// startFeed starts a source of one kind on first.
type startFeed func(t *testing.T, first string) docFeed

// fileFeedOn is a source on a flags file, each document renamed over it.
func fileFeedOn(t *testing.T, first string) docFeed {
	fx := setup(t, nil, first)
	return docFeed{src: fx.source(t), logs: fx.logs, put: func(t *testing.T, doc string) { fx.replace(t, doc) }}
}

// dbFeedOn is a source on the control database's rollout_flags row, each
// document written by hand at a new row version (the feed reads the
// document only when the row's version changes), as an operator editing
// the row would.
func dbFeedOn(t *testing.T, first string) docFeed {
	db := testdb.New(t)
	row := int64(1)
	if _, err := db.DB.Exec(`INSERT INTO rollout_flags (id, version, document, updated_at) VALUES (1, ?, ?, NOW(6))`, row, first); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	src, err := New(t.Context(), Config{DB: db.DB, PollInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	must(t, err)
	t.Cleanup(func() { must(t, src.Close()) })
	return docFeed{src: src, logs: logs, put: func(t *testing.T, doc string) {
		t.Helper()
		row++
		if _, err := db.DB.Exec(`UPDATE rollout_flags SET version = ?, document = ? WHERE id = 1`, row, doc); err != nil {
			t.Fatal(err)
		}
	}}
}

// grpcFeedOn is a source on a flagd daemon, which pushes each document.
func grpcFeedOn(t *testing.T, first string) docFeed {
	srv := flagdtest.New(t, first)
	src, logs := flagdSource(t, srv.Addr())
	return docFeed{src: src, logs: logs, put: func(_ *testing.T, doc string) { srv.Set(doc) }}
}

// withoutVersion is doc with metadata.version taken out of both flags,
// the rest as it was.
func withoutVersion(t *testing.T, doc string) string {
	t.Helper()
	var d map[string]any
	must(t, json.Unmarshal([]byte(doc), &d))
	for _, fl := range d["flags"].(map[string]any) {
		fl := fl.(map[string]any)
		meta, _ := fl["metadata"].(map[string]any)
		delete(meta, flagdoc.MetaVersion)
		if len(meta) == 0 {
			delete(fl, "metadata")
		}
	}
	out, err := json.Marshal(d)
	must(t, err)
	if strings.Contains(string(out), `"version"`) {
		t.Fatalf("a version is left in %s", out)
	}
	return string(out)
}

// refusedFor waits until src reports a refusal naming cause, and checks
// that the log line that recorded it names the cause too.
func refusedFor(t *testing.T, f docFeed, cause, line string) {
	t.Helper()
	eventually(t, 10*time.Second, "a refusal naming "+cause, func() bool {
		_, err := f.src.Rejected()
		return err != nil && strings.Contains(err.Error(), cause)
	})
	// rejection.reject logs before it records, under one lock: the line
	// is there once the refusal is.
	found := false
	for _, l := range strings.Split(f.logs.String(), "\n") {
		found = found || (strings.Contains(l, line) && strings.Contains(l, cause))
	}
	if !found {
		t.Errorf("no log line %q naming %q:\n%s", line, cause, f.logs)
	}
}

// refusesWithoutVersion: a source whose first document has no version is
// not loaded and says why; once a versioned one loads, a document without
// a version (reservoir's flags without it, or no flags at all) is refused
// and the last valid flags stay in force.
func refusesWithoutVersion(t *testing.T, start startFeed) {
	f := start(t, withoutVersion(t, flagdDoc(t, authority.ModeMySQL, 1)))
	notLoaded(t, f.src)
	refusedFor(t, f, causeRequired, "could not be loaded; no decisions until it is fixed")

	f.put(t, flagdDoc(t, authority.ModeShadow, 3))
	answers(t, f.src, authority.ModeShadow, 3)
	if _, err := f.src.Rejected(); err != nil {
		t.Fatalf("Rejected() after a versioned document loaded: %v", err)
	}

	f.put(t, withoutVersion(t, flagdDoc(t, authority.ModeMySQL, 4)))
	refusedFor(t, f, causeRequired, causeRejected)
	stillAnswers(t, f.src, authority.ModeShadow, 3, "after a document without a version")

	before := f.logs.count(causeRequired)
	f.put(t, `{"flags": {}}`)
	eventually(t, 10*time.Second, "the document without flags to be refused", func() bool { return f.logs.count(causeRequired) > before })
	stillAnswers(t, f.src, authority.ModeShadow, 3, "after a document without flags")
	if _, err := f.src.Rejected(); err == nil || !strings.Contains(err.Error(), causeRequired) {
		t.Errorf("Rejected() after a document without flags: %v, want it naming %q", err, causeRequired)
	}
}

// refusesGoingBack: with version 9 in force, a document at 7 is refused,
// and so is a changed one still at 9; the one in force put back (the same
// bytes again) is no change and clears the refusal without a line; a
// higher version loads.
func refusesGoingBack(t *testing.T, start startFeed) {
	inForce := flagdDoc(t, authority.ModeMySQL, 9)
	f := start(t, inForce)
	answers(t, f.src, authority.ModeMySQL, 9)

	f.put(t, flagdDoc(t, authority.ModeShadow, 7))
	refusedFor(t, f, "metadata.version 7 is lower than the version in force, 9: flags never go back; write a higher version", causeRejected)
	stillAnswers(t, f.src, authority.ModeMySQL, 9, "after a document at a lower version")

	f.put(t, flagdDoc(t, authority.ModeRedis, 9))
	refusedFor(t, f, "metadata.version 9 is the version in force, but the document changed: the version must grow with every change; write a higher version", causeRejected)
	stillAnswers(t, f.src, authority.ModeMySQL, 9, "after a changed document at the same version")

	rejections := f.logs.count(causeRejected)
	f.put(t, inForce)
	eventually(t, 10*time.Second, "the refusal to clear once the document in force is put back", func() bool {
		_, err := f.src.Rejected()
		return err == nil
	})
	if n := f.logs.count(causeRejected); n != rejections {
		t.Errorf("the document in force read again was logged as rejected (%d lines, then %d):\n%s", rejections, n, f.logs)
	}
	stillAnswers(t, f.src, authority.ModeMySQL, 9, "after the put back")

	f.put(t, flagdDoc(t, authority.ModeShadow, 10))
	answers(t, f.src, authority.ModeShadow, 10)
}

func TestFileFeedRefusesADocumentWithoutVersion(t *testing.T) {
	t.Parallel()
	refusesWithoutVersion(t, fileFeedOn)
}

func TestFileFeedRefusesAVersionThatGoesBack(t *testing.T) {
	t.Parallel()
	refusesGoingBack(t, fileFeedOn)
}

func TestDBFeedRefusesADocumentWithoutVersion(t *testing.T) {
	t.Parallel()
	refusesWithoutVersion(t, dbFeedOn)
}

func TestDBFeedRefusesAVersionThatGoesBack(t *testing.T) {
	t.Parallel()
	refusesGoingBack(t, dbFeedOn)
}

func TestGRPCFeedRefusesADocumentWithoutVersion(t *testing.T) {
	t.Parallel()
	refusesWithoutVersion(t, grpcFeedOn)
}

func TestGRPCFeedRefusesAVersionThatGoesBack(t *testing.T) {
	t.Parallel()
	refusesGoingBack(t, grpcFeedOn)
}
