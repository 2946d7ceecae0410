package rollout_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
	"github.com/seed31b0e981/reservoir/rollout/flagsource"
)

// Engaging the kill switch for one pod: the change goes through the flags
// file (what `reservoir rollout kill` and the admin API do), at the next
// version of the flags, and every replica watching the file obeys within
// milliseconds, its decisions carrying the new version.
func ExampleFlags_EngageKill() {
	dir, err := os.MkdirTemp("", "flags")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	file := flagdoc.FlagsFile{Path: filepath.Join(dir, "reservoir.flagd.json")}

	// pod-b runs on MySQL.
	if _, _, err := file.Update(func(f *flagdoc.Flags) error {
		return f.SetMode(flagdoc.PodScope("pod-b"), authority.ModeMySQL)
	}); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	replica, err := flagsource.New(ctx, flagsource.Config{
		Path:   file.Path,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer replica.Close()
	d, _ := replica.Decide(ctx, "pod-b", 1001)
	fmt.Printf("before: mode %s, kill %s, authority %s, version %d\n", d.Mode, d.Kill, d.Route().Authority, d.Version)

	// MySQL on pod-b misbehaves: Redis answers again, dual writes go on.
	_, after, err := file.Update(func(f *flagdoc.Flags) error {
		return f.EngageKill(flagdoc.PodScope("pod-b"), authority.KillRedis, flagdoc.Attribution{
			Actor: "alice", Reason: "pod-b MySQL p99 over 2s",
		})
	})
	if err != nil {
		log.Fatal(err)
	}
	k := after.KillAt(flagdoc.PodScope("pod-b"))
	fmt.Printf("engaged: %s by %s: %s (version %d)\n", k.State, k.Actor, k.Reason, after.Version)

	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if d, _ = replica.Decide(ctx, "pod-b", 1001); d.Kill == authority.KillRedis {
			break
		}
	}
	p := d.Route()
	fmt.Printf("after: mode %s, kill %s, authority %s, effective %s, version %d\n", d.Mode, d.Kill, p.Authority, p.Effective, d.Version)

	// Other pods are not affected.
	d, _ = replica.Decide(ctx, "pod-a", 2002)
	fmt.Printf("pod-a: mode %s, kill %s\n", d.Mode, d.Kill)
	// Output:
	// before: mode mysql, kill off, authority mysql, version 1
	// engaged: redis by alice: pod-b MySQL p99 over 2s (version 2)
	// after: mode mysql, kill redis, authority redis, effective shadow, version 2
	// pod-a: mode redis, kill off
}
