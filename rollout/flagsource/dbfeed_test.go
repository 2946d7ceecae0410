package flagsource

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// A replica on the control database clears its rejection once the
// document in force is put back in the row, whatever version the refused
// row carried: a raised one, or 0 (a real row version, not the feed's
// "none refused"; the document at 0 is refused for its version too).
// Until it clears, reservoir_rollout_flags_rejected and its alert stay up
// over flags that are valid again.
func TestDBFeedPutBackClearsTheRejection(t *testing.T) {
	t.Parallel()
	for name, badRow := range map[string]int64{"refused at a raised version": 2, "refused at version 0": 0} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			ctx := context.Background()
			good := flagdoc.NewFlags()
			good.Version = 1
			if err := good.SetMode(flagdoc.PodScope("pod-a"), authority.ModeMySQL); err != nil {
				t.Fatal(err)
			}
			if err := (flagdoc.FlagsTable{DB: db.DB}).Write(good); err != nil {
				t.Fatal(err)
			}
			src, err := New(ctx, Config{DB: db.DB, PollInterval: 5 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { src.Close() })
			inForce := func(when string) {
				t.Helper()
				if d, err := src.Decide(ctx, "pod-a", 1); err != nil || d.Mode != authority.ModeMySQL || d.Version != 1 {
					t.Fatalf("%s: %+v, %v; want the document in force (mysql at version 1)", when, d, err)
				}
			}
			inForce("at start")

			var doc string
			if err := db.DB.QueryRow(`SELECT document FROM rollout_flags WHERE id = 1`).Scan(&doc); err != nil {
				t.Fatal(err)
			}
			bad := strings.ReplaceAll(strings.Replace(doc, `"mysql": "mysql"`, `"mysqll": "mysqll"`, 1), `"version": 1`, `"version": `+strconv.FormatInt(badRow, 10))
			if _, err := db.DB.Exec(`UPDATE rollout_flags SET version = ?, document = ? WHERE id = 1`, badRow, bad); err != nil {
				t.Fatal(err)
			}
			eventually(t, 2*time.Second, "the hand-edited document to be rejected", func() bool { _, err := src.Rejected(); return err != nil })
			inForce("with the document rejected")

			// Put back as it was: the version in force is the newest again.
			if _, err := db.DB.Exec(`UPDATE rollout_flags SET version = 1, document = ? WHERE id = 1`, doc); err != nil {
				t.Fatal(err)
			}
			eventually(t, 2*time.Second, "the rejection to clear once the document in force is put back", func() bool { _, err := src.Rejected(); return err == nil })
			inForce("after the put back")
		})
	}
}

// PollNow reads the control database's flags at once: a source polling
// once an hour applies a change within a moment of being told, where it
// would wait for the hour. (The kill switch document of Config.Kills is
// followed by a source of the same feed, which PollNow tells too.)
func TestPollNowReadsAtOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	flags := flagdoc.FlagsTable{DB: db.DB}
	first := flagdoc.NewFlags()
	first.Version = 1
	if err := flags.Write(first); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	src, err := New(ctx, Config{DB: db.DB, PollInterval: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	if _, _, err := flags.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.PodScope("pod-a"), authority.ModeMySQL) }); err != nil {
		t.Fatal(err)
	}
	src.PollNow()
	eventually(t, 5*time.Second, "the change to apply once PollNow is called", func() bool {
		d, err := src.Decide(ctx, "pod-a", 1)
		return err == nil && d.Mode == authority.ModeMySQL && d.Version == 2
	})
}
