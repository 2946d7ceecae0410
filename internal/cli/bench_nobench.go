//go:build nobench

package cli

import (
	"context"
	"errors"
	"io"
)

// A build with -tags nobench (the container image: see the Dockerfile)
// links no benchmark and no fault injection: bench.go, which imports
// internal/bench and through it toxiproxy, is left out, and `reservoir
// bench` says so instead of running. deploy/binary_test.go checks that
// such a build links none of those modules.

func init() {
	c := commands["bench"]
	c.summary += " (not in this build: -tags nobench)"
	commands["bench"] = c
}

// errNoBench is what `reservoir bench` answers in a nobench build.
var errNoBench = errors.New("this binary was built without the benchmark (-tags nobench, as the container image is); " +
	"run it from a build without the tag: make build, or go build ./cmd/reservoir")

func runBench(_ context.Context, _ []string, _, _ io.Writer) error {
	return errNoBench
}
