package sqlcheck_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"
	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/packages"

	"github.com/seed31b0e981/reservoir/internal/sqlcheck"
)

// The analyzer can fail: every statement planted in testdata/src/bad is
// reported with the value that makes it unsafe, and nothing else; the
// store-shaped builders in testdata/src/good are not.
func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), sqlcheck.Analyzer, "bad", "good")
}

// The analyzer reads the real store code, not only its testdata: the
// mysqlstore package, plus one method that splices a token into a
// statement the way a careless fix would, gives exactly that finding.
func TestCatchesAValueSplicedIntoTheStore(t *testing.T) {
	plantedFinding(t, "mysqlstore", 4, `package mysqlstore

func (s *Store) holdsOf(token string) string {
	return tag(callerRead) + sqlStateRead + " AND token = '" + token + "'"
}
`)
}

// So does the control database's one package of statements: an exported
// function that appends a value to a statement before sending it is
// exactly one finding.
func TestCatchesAValueSplicedIntoTheControlDatabase(t *testing.T) {
	plantedFinding(t, filepath.Join("internal", "controldb"), 6, `package controldb

import "context"

func AuditOf(ctx context.Context, q Querier, actor string) error {
	_, err := q.ExecContext(ctx, sqlAuditList+" WHERE actor = '"+actor+"'")
	return err
}
`)
}

// plantedFinding loads the package at dir (from the repository's root)
// with src added as planted.go and wants exactly one finding, on src's
// line.
func plantedFinding(t *testing.T, dir string, line int, src string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", dir))
	if err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(dir, "planted.go")
	cfg := &packages.Config{
		Mode:    packages.LoadAllSyntax &^ packages.NeedDeps, // the dependencies' types from export data
		Dir:     dir,
		Overlay: map[string][]byte{planted: []byte(src)},
	}
	pkgs, err := packages.Load(cfg, ".")
	if err != nil {
		t.Fatal(err)
	}
	if packages.PrintErrors(pkgs) > 0 {
		t.Fatalf("%s does not load", dir)
	}
	graph, err := checker.Analyze([]*analysis.Analyzer{sqlcheck.Analyzer}, pkgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, act := range graph.Roots {
		if act.Err != nil {
			t.Fatal(act.Err)
		}
		for _, d := range act.Diagnostics {
			found = append(found, act.Package.Fset.Position(d.Pos).String()+": "+d.Message)
		}
	}
	if len(found) != 1 || !strings.Contains(found[0], "planted.go:"+strconv.Itoa(line)+":") {
		t.Fatalf("findings %q, want exactly the planted statement", found)
	}
	t.Log(found[0])
}
