package demo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 27 (7): `make demo` compiled for about two minutes on a first run
// without a word. It says what it builds, and that a first build takes a
// couple of minutes, before it compiles; the README says so too.
func TestMakeDemoSaysItCompilesFirst(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("needs make (make demo is the README's first command)")
	}
	// -n prints the recipes without running them.
	out, err := exec.Command("make", "-n", "-C", root, "demo").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n demo: %v\n%s", err, out)
	}
	lines := strings.Split(string(out), "\n")
	said, built := -1, -1
	for i, l := range lines {
		if said < 0 && strings.Contains(l, "echo") && strings.Contains(l, "building bin/reservoir") && strings.Contains(l, "a couple of minutes") {
			said = i
		}
		if built < 0 && strings.Contains(l, " build -o bin/reservoir ./cmd/reservoir;") {
			built = i
		}
	}
	if said < 0 || built < 0 || said > built {
		t.Errorf("make demo does not say that it builds bin/reservoir, and that a first build takes a couple of minutes, before it compiles "+
			"(said at line %d, compiled at line %d):\n%s", said, built, out)
	}

	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "```sh\nmake demo\n```")
	if !ok {
		t.Fatal("README.md has no make demo block")
	}
	para, _, _ := strings.Cut(strings.TrimSpace(after), "\n\n")
	if !strings.Contains(para, "first run compiles") {
		t.Errorf("README.md does not say, after make demo, that the first run compiles for a while:\n%s", para)
	}
}
