package mutants

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindAndApply(t *testing.T) {
	ms, err := Find("testdata", "p")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.String())
	}
	want := []string{
		"CONDITIONALS_BOUNDARY p/p.go:4:7 < -> <=",
		"CONDITIONALS_NEGATION p/p.go:4:7 < -> >=",
		"INCREMENT_DECREMENT p/p.go:5:4 ++ -> --",
		"ARITHMETIC_BASE p/p.go:7:12 * -> /",
		"INVERT_NEGATIVES p/p.go:7:9 - -> +",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("mutants:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	src, _ := os.ReadFile(filepath.Join("testdata", "p", "p.go"))
	out, err := Apply(src, ms[1])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "if a >= b {") {
		t.Fatalf("applied:\n%s", out)
	}
	if _, err := Apply(out, ms[0]); err == nil {
		t.Fatal("a mutant applied over a token that is no longer there")
	}
}

func TestCoverage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.out")
	os.WriteFile(path, []byte("mode: set\nm/p/p.go:3.26,4.11 1 1\nm/p/p.go:4.11,6.3 1 0\nm/p/p.go:7.2,7.16 1 1\n"), 0o644)
	cov, err := ReadCoverage(path, "m")
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := Find("testdata", "p")
	for _, m := range ms {
		if want := m.Line != 5; cov.Covers(m) != want {
			t.Errorf("%s: covered %v, want %v", m, !want, want)
		}
	}
}

func TestInterval(t *testing.T) {
	lo, hi := Interval(54, 60)
	if lo < 0.79 || lo > 0.80 || hi < 0.95 || hi > 0.96 {
		t.Fatalf("Wilson interval of 54/60 = %.3f-%.3f, want about 0.795-0.953", lo, hi)
	}
}

func TestRelocate(t *testing.T) {
	before, _ := os.ReadFile(filepath.Join("testdata", "p", "p.go"))
	ms, _ := Find("testdata", "p")
	after := []byte(strings.Replace(string(before), "package p\n", "package p\n\n// A comment moves every line down.\n", 1))
	m, ok := Relocate(before, after, ms[1])
	if !ok || m.Line != ms[1].Line+2 {
		t.Fatalf("relocated %v, %v; want line %d", m, ok, ms[1].Line+2)
	}
	if out, err := Apply(after, m); err != nil || !strings.Contains(string(out), "if a >= b {") {
		t.Fatalf("applied the relocated mutant: %v\n%s", err, out)
	}
	gone := []byte(strings.Replace(string(before), "if a < b {", "if b > a {", 1))
	if _, ok := Relocate(before, gone, ms[1]); ok {
		t.Fatal("relocated a mutant whose line was rewritten")
	}
}

func TestRelocateNeedsTheContext(t *testing.T) {
	src := []byte("package q\n\nfunc f(a int) bool {\n\tif a == 1 {\n\t\treturn true\n\t}\n\treturn false\n}\n\nfunc g(a int) bool {\n\tif a == 1 {\n\t\treturn false\n\t}\n\treturn true\n}\n")
	m := Mutant{File: "q.go", Line: 11, Col: 7, Offset: strings.LastIndex(string(src), "=="), Type: "CONDITIONALS_NEGATION", From: "==", To: "!="}
	if _, err := Apply(src, m); err != nil {
		t.Fatal(err)
	}
	// g is rewritten; f's line reads the same but is another mutant.
	after := []byte(strings.Replace(string(src), "\tif a == 1 {\n\t\treturn false", "\tswitch {\n\tcase a == 1:\n\t\treturn false", 1))
	if r, ok := Relocate(src, after, m); ok {
		t.Fatalf("relocated g's mutant to %v, a line of f that reads the same", r)
	}
}
