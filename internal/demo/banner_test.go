package demo

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// commandRE finds a reservoir command in the demo's output or in a string
// of its code: the program, then one of the subcommands a person runs.
var commandRE = regexp.MustCompile(`(\S*)reservoir (rollout|reconcile|demo clean|migrate|serve|clients|bench)\b`)

// Issue 27 (7): the banner mixed `reservoir rollout ...` and
// `bin/reservoir ...`, and only the second works from the checkout (make
// demo runs bin/reservoir, and nothing puts reservoir on the PATH). Every
// command the demo prints names the program as it was run
// (Config.Program).
func TestBannerSpellsEveryCommandOneWay(t *testing.T) {
	var out bytes.Buffer
	cfg := Config{Out: &out, Program: "bin/reservoir"}.WithDefaults()
	info := Info{URL: "http://127.0.0.1:8088", Dashboard: "http://127.0.0.1:8088/dashboard#token=x", Token: cfg.AdminToken,
		ClientToken: "client-token", Dir: "/tmp/demo", Topology: "/tmp/demo/topology.toml"}
	printWelcome(&printer{out: &out}, info, cfg)
	found := commandRE.FindAllStringSubmatch(out.String(), -1)
	if len(found) == 0 {
		t.Fatalf("the banner names no reservoir command:\n%s", out.String())
	}
	for _, m := range found {
		if m[1] != "bin/" {
			t.Errorf("the banner says %q, not bin/reservoir %s ...", m[0], m[2])
		}
	}
}

// No string of the demo's code names the program itself: each printed
// command takes Config.Program (the walker's "the next stages are
// yours: `reservoir rollout ...`" did not).
func TestNoCommandHardcodesTheProgram(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for _, m := range commandRE.FindAllStringSubmatch(s, -1) {
				t.Errorf("%s: %q names the program itself; print Config.Program instead", fset.Position(lit.Pos()), m[0])
			}
			return true
		})
	}
}
