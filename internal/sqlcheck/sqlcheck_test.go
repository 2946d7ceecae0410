package sqlcheck_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/seed31b0e981/reservoir/internal/sqlcheck"
)

// The packages that send SQL. Every statement in them must be fixed
// fragments and placeholders; every value a parameter.
var sqlPackages = []string{"mysqlstore", "redisstore", "compare", "rollout"}

func TestNoSQLBuiltFromValues(t *testing.T) {
	for _, pkg := range sqlPackages {
		t.Run(pkg, func(t *testing.T) {
			findings, err := sqlcheck.Dir(filepath.Join("..", "..", pkg))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range findings {
				t.Errorf("%s", f)
			}
		})
	}
}

// The check can fail: every planted line marked "// want" in testdata/bad
// is reported, and nothing else; the store-shaped builders in
// testdata/good are not.
func TestCheckCatchesPlantedSQL(t *testing.T) {
	findings, err := sqlcheck.Dir(filepath.Join("testdata", "bad"))
	if err != nil {
		t.Fatal(err)
	}
	want := wantLines(t, filepath.Join("testdata", "bad", "bad.go"))
	got := map[int]bool{}
	for _, f := range findings {
		line := lineOf(t, f.Pos)
		got[line] = true
		if !want[line] {
			t.Errorf("unexpected finding: %s", f)
		}
		t.Logf("%s", f)
	}
	for line := range want {
		if !got[line] {
			t.Errorf("bad.go:%d: planted SQL with a value was not reported", line)
		}
	}

	findings, err = sqlcheck.Dir(filepath.Join("testdata", "good"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		t.Errorf("false positive on the stores' pattern: %s", f)
	}
}

func wantLines(t *testing.T, path string) map[int]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[int]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if strings.HasSuffix(sc.Text(), "// want") {
			want[n] = true
		}
	}
	if len(want) == 0 {
		t.Fatalf("%s plants nothing", path)
	}
	return want
}

func lineOf(t *testing.T, pos string) int {
	t.Helper()
	parts := strings.Split(pos, ":")
	if len(parts) < 3 {
		t.Fatalf("position %q", pos)
	}
	n, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil {
		t.Fatalf("position %q: %v", pos, err)
	}
	return n
}

// The check reads the real store code, not only its testdata: the same
// files as mysqlstore, plus one method that splices a token into a
// statement the way a careless fix would, give exactly that finding.
func TestCheckCatchesAValueSplicedIntoTheStore(t *testing.T) {
	src := filepath.Join("..", "..", "mysqlstore")
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			b, err := os.ReadFile(filepath.Join(src, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	planted := `package mysqlstore

func (s *Store) holdsOf(token string) string {
	return tag(callerRead) + sqlStateRead + " AND token = '" + token + "'"
}
`
	if err := os.WriteFile(filepath.Join(dir, "planted.go"), []byte(planted), 0o644); err != nil {
		t.Fatal(err)
	}
	findings, err := sqlcheck.Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(findings) != 1 || !strings.Contains(findings[0].Pos, "planted.go:4") {
		t.Fatalf("findings %v, want exactly the planted statement", findings)
	}
	t.Logf("%s", findings[0])
}
