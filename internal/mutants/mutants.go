// Package mutants finds and applies the token mutants gremlins (v0.6.0)
// makes with its default operators, so that a seeded random sample of them
// can be run when a package's whole mutant set would take hours: each
// mutant of mysqlstore runs a suite of about a minute against the real
// servers, and gremlins has no way to run a subset of its mutants.
//
// The operators, and which are on, are gremlins' defaults: arithmetic base
// (+ - * / %), conditionals boundary (< to <=, ...), conditionals negation
// (== to !=, < to >=, ...), increment-decrement and invert negatives (-x
// to +x). A mutant counts only where the package's own tests cover its
// position, as in gremlins.
package mutants

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Mutant is one token replaced at one position of one file.
type Mutant struct {
	File string `json:"file"` // relative to the module root
	Line int    `json:"line"`
	Col  int    `json:"col"`
	// Offset is the byte offset of the token in the file.
	Offset int    `json:"offset"`
	Type   string `json:"type"`
	From   string `json:"from"`
	To     string `json:"to"`
}

// String names the mutant as gremlins prints it.
func (m Mutant) String() string {
	return fmt.Sprintf("%s %s:%d:%d %s -> %s", m.Type, m.File, m.Line, m.Col, m.From, m.To)
}

// operators maps a token to the replacements gremlins' default operators
// make of it, by operator name.
var operators = map[token.Token][]struct {
	typ string
	to  token.Token
}{
	token.ADD: {{"ARITHMETIC_BASE", token.SUB}},
	token.SUB: {{"ARITHMETIC_BASE", token.ADD}},
	token.MUL: {{"ARITHMETIC_BASE", token.QUO}},
	token.QUO: {{"ARITHMETIC_BASE", token.MUL}},
	token.REM: {{"ARITHMETIC_BASE", token.MUL}},
	token.EQL: {{"CONDITIONALS_NEGATION", token.NEQ}},
	token.NEQ: {{"CONDITIONALS_NEGATION", token.EQL}},
	token.LSS: {{"CONDITIONALS_BOUNDARY", token.LEQ}, {"CONDITIONALS_NEGATION", token.GEQ}},
	token.LEQ: {{"CONDITIONALS_BOUNDARY", token.LSS}, {"CONDITIONALS_NEGATION", token.GTR}},
	token.GTR: {{"CONDITIONALS_BOUNDARY", token.GEQ}, {"CONDITIONALS_NEGATION", token.LEQ}},
	token.GEQ: {{"CONDITIONALS_BOUNDARY", token.GTR}, {"CONDITIONALS_NEGATION", token.LSS}},
	token.INC: {{"INCREMENT_DECREMENT", token.DEC}},
	token.DEC: {{"INCREMENT_DECREMENT", token.INC}},
}

// Find lists the mutants of the non-test Go files of the package in dir
// (relative to root, the module root), in file and position order.
func Find(root, dir string) ([]Mutant, error) {
	files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []Mutant
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, path)
		add := func(pos token.Pos, tok token.Token, unary bool) {
			p := fset.Position(pos)
			for _, op := range operators[tok] {
				typ := op.typ
				if unary {
					typ = "INVERT_NEGATIVES" // -x becomes +x
				}
				out = append(out, Mutant{File: rel, Line: p.Line, Col: p.Column, Offset: p.Offset,
					Type: typ, From: tok.String(), To: op.to.String()})
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				add(n.OpPos, n.Op, false)
			case *ast.IncDecStmt:
				add(n.TokPos, n.Tok, false)
			case *ast.UnaryExpr:
				if n.Op == token.SUB {
					add(n.OpPos, n.Op, true)
				}
			}
			return true
		})
	}
	return out, nil
}

// Apply returns src with m's token replaced, or an error if the token at
// m's offset is not the one m replaces (the file changed since Find).
func Apply(src []byte, m Mutant) ([]byte, error) {
	end := m.Offset + len(m.From)
	if m.Offset < 0 || end > len(src) || string(src[m.Offset:end]) != m.From {
		return nil, fmt.Errorf("mutants: %s: the token at offset %d is not %q", m.File, m.Offset, m.From)
	}
	out := make([]byte, 0, len(src)+1)
	out = append(out, src[:m.Offset]...)
	out = append(out, m.To...)
	return append(out, src[end:]...), nil
}

// Coverage is the set of covered blocks of a `go test -coverprofile` file.
type Coverage map[string][]block

type block struct{ startLine, startCol, endLine, endCol int }

// ReadCoverage reads a cover profile; modulePath is trimmed from its file
// names so that they match Mutant.File.
func ReadCoverage(path, modulePath string) (Coverage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cov := Coverage{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "mode:") || line == "" {
			continue
		}
		// name.go:12.3,14.5 2 1
		colon := strings.LastIndex(line, ":")
		fields := strings.Fields(line[colon+1:])
		if colon < 0 || len(fields) != 3 {
			return nil, fmt.Errorf("mutants: %s: a line that is not a cover block: %q", path, line)
		}
		if fields[2] == "0" {
			continue
		}
		var b block
		if _, err := fmt.Sscanf(fields[0], "%d.%d,%d.%d", &b.startLine, &b.startCol, &b.endLine, &b.endCol); err != nil {
			return nil, fmt.Errorf("mutants: %s: %q: %w", path, line, err)
		}
		name := strings.TrimPrefix(line[:colon], modulePath+"/")
		cov[name] = append(cov[name], b)
	}
	return cov, s.Err()
}

// Covers reports whether a covered block holds m's position.
func (c Coverage) Covers(m Mutant) bool {
	for _, b := range c[filepath.ToSlash(m.File)] {
		after := m.Line > b.startLine || (m.Line == b.startLine && m.Col >= b.startCol)
		before := m.Line < b.endLine || (m.Line == b.endLine && m.Col <= b.endCol)
		if after && before {
			return true
		}
	}
	return false
}

// Interval is the Wilson score interval at 95% for k successes in n.
func Interval(k, n int) (lo, hi float64) {
	if n == 0 {
		return 0, 1
	}
	const z = 1.96
	p, nn := float64(k)/float64(n), float64(n)
	d := 1 + z*z/nn
	c := (p + z*z/(2*nn)) / d
	w := z * math.Sqrt(p*(1-p)/nn+z*z/(4*nn*nn)) / d
	return c - w, c + w
}

// Percent formats a ratio as a percentage with one decimal.
func Percent(r float64) string { return strconv.FormatFloat(100*r, 'f', 1, 64) + "%" }

// Relocate finds m, a mutant of a file as it was (before), in the file as
// it is now (after): the same source line with the same two lines on each
// side (as a patch finds its place), nearest to where it was, and the same
// column. It reports false when that is gone (the code around it was
// rewritten), so an earlier run's survivor can be judged again after edits
// elsewhere in its file moved it, and never stands for another line that
// reads the same.
func Relocate(before, after []byte, m Mutant) (Mutant, bool) {
	old := strings.Split(string(before), "\n")
	if m.Line < 1 || m.Line > len(old) {
		return m, false
	}
	lines := strings.Split(string(after), "\n")
	same := func(i int) bool { // lines[i] and its context match old[m.Line-1]'s
		for d := -2; d <= 2; d++ {
			o, n := m.Line-1+d, i+d
			oOK, nOK := o >= 0 && o < len(old), n >= 0 && n < len(lines)
			if oOK != nOK || oOK && old[o] != lines[n] {
				return false
			}
		}
		return true
	}
	found, start := false, 0
	out := m
	for i, l := range lines {
		line := i + 1
		c := m
		c.Line, c.Offset = line, start+m.Col-1
		start += len(l) + 1
		if !same(i) {
			continue
		}
		if _, err := Apply(after, c); err != nil {
			continue
		}
		if !found || abs(line-m.Line) < abs(out.Line-m.Line) {
			found, out = true, c
		}
	}
	return out, found
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
