package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/seed31b0e981/reservoir/internal/wire"
)

// Version is the release this binary was built as. A release build sets
// it: go build -ldflags "-X github.com/seed31b0e981/reservoir/internal/cli.Version=v1.2.3"
// (the Dockerfile does, from its VERSION build argument).
var Version = "devel"

// Revision is the commit this binary was built from when Go could not
// record it (a build outside a checkout: the container build, whose
// context leaves .git out). Set like Version, from the Dockerfile's
// REVISION build argument; Go's vcs.revision wins when it is there.
var Revision = ""

// buildVersion is this binary's build as the wire shows it.
func buildVersion() wire.Version {
	v := wire.Version{Version: Version, Revision: Revision, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.GoVersion = info.GoVersion
	v.Module = info.Main.Path
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				v.Time = t.UTC()
			}
		}
	}
	return v
}

func runVersion(_ context.Context, args []string, out, _ io.Writer) error {
	fs := newFlags("version", "version [--json]", out)
	asJSON := fs.Bool("json", false, "print JSON (snake_case keys; docs/cli.md)")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	v := buildVersion()
	if *asJSON {
		return writeJSON(out, v)
	}
	fmt.Fprintf(out, "version  %s\n", v.Version)
	rev := v.Revision
	switch {
	case rev == "":
		rev = "unknown"
	case v.Modified:
		rev += " (modified)"
	}
	fmt.Fprintf(out, "commit   %s\n", rev)
	if !v.Time.IsZero() {
		fmt.Fprintf(out, "time     %s (the commit's)\n", v.Time.Format(time.RFC3339))
	}
	fmt.Fprintf(out, "go       %s %s\n", v.GoVersion, v.Platform)
	return nil
}
