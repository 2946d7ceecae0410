// Command sqlcheck reports SQL built from values (package
// internal/sqlcheck). scripts/test runs it over the repository:
//
//	go run ./internal/sqlcheck/cmd/sqlcheck -test=false ./...
//
// Test files are left out: their statements build fixtures, never
// anything a request reaches.
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/seed31b0e981/reservoir/internal/sqlcheck"
)

func main() { singlechecker.Main(sqlcheck.Analyzer) }
