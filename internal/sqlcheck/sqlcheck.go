// Package sqlcheck finds SQL built from values: a statement assembled with
// fmt.Sprintf, string concatenation or a strings.Builder where a piece is
// not a fixed fragment. STYLE.md's rule is that every value travels as a
// parameter; only placeholders and fixed fragments (string constants, and
// helpers that repeat them, like mysqlstore's repeatJoin("?", ",", n)) may
// make up a statement. Its test runs it over the packages that hold SQL.
//
// It reads source only (go/parser, go/ast), one package directory at a
// time, and follows strings through the package: a helper's parameter is
// fixed when every call in the package passes a fixed argument (tag(caller)
// with caller always one of the caller constants is fixed; a helper no
// code in the package calls is not). It is deliberately syntactic: no type
// checking, names resolved per function without scopes, so it errs on the
// side of reporting. It never changes code.
package sqlcheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Finding is SQL built with a value in it.
type Finding struct {
	// Pos is where the statement is built (file:line:column).
	Pos string
	// SQL is the statement, abbreviated, each value shown as <value>.
	SQL string
	// Values are the pieces that are not fixed fragments.
	Values []string
}

func (f Finding) String() string {
	return fmt.Sprintf("%s: SQL built from values %s: %q", f.Pos, strings.Join(f.Values, ", "), f.SQL)
}

// sqlish reports whether fixed text looks like SQL: one of the statement
// keywords in capitals (the project's SQL is written in capitals), or a
// statement verb in any case at its start.
func sqlish(text string) bool {
	return sqlKeywords.MatchString(text) || sqlStart.MatchString(text)
}

var (
	sqlKeywords = regexp.MustCompile(`\b(SELECT|INSERT|UPDATE|DELETE|REPLACE|FROM|WHERE|VALUES|SET|LIMIT|JOIN|UNION|ORDER BY|GROUP BY|CREATE|DROP|ALTER|TRUNCATE)\b`)
	sqlStart    = regexp.MustCompile(`(?i)^\s*(/\*.*?\*/\s*)?(select|insert|update|delete|replace|create|drop|alter|truncate|with)\s`)
)

// Dir checks the Go package in dir (test files excluded).
func Dir(dir string) ([]Finding, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("sqlcheck: no Go files in %s", dir)
	}
	return newChecker(fset, files).run(), nil
}

// taint is what a string expression is made of, in order: fixed
// fragments, values, and parameters of the enclosing function (fixed or
// not depending on the callers).
type taint []piece

type piece struct {
	frag  string // fixed text, when value and param are empty
	value string // a value, as written in the source
	why   string // when set, why value is not fixed
	param *param
}

type param struct {
	fn   *ast.FuncDecl
	idx  int
	name string
}

func (t *taint) add(o taint) { *t = append(*t, o...) }

func value(desc string) taint { return taint{{value: desc}} }

func frag(s string) taint { return taint{{frag: s}} }

// fixed reports whether t has no value and no parameter: a constant.
func (t taint) fixed() bool {
	for _, p := range t {
		if p.value != "" || p.param != nil {
			return false
		}
	}
	return true
}

// text is the statement with each value shown as <value>.
func (t taint) text() string {
	var b strings.Builder
	for _, p := range t {
		switch {
		case p.value != "":
			b.WriteString("<" + p.value + ">")
		case p.param != nil:
			b.WriteString("<" + p.param.name + ">")
		default:
			b.WriteString(p.frag)
		}
	}
	return b.String()
}

// fixedText is the statement's fixed text only.
func (t taint) fixedText() string {
	var b strings.Builder
	for _, p := range t {
		b.WriteString(p.frag)
	}
	return b.String()
}

func (t taint) values() []string {
	var out []string
	for _, p := range t {
		switch {
		case p.why != "":
			out = append(out, p.value+" ("+p.why+")")
		case p.value != "":
			out = append(out, p.value)
		}
	}
	return out
}

// constant is a resolved constant: its text when it is a string.
type constant struct {
	text     string
	isString bool
}

type checker struct {
	fset    *token.FileSet
	files   []*ast.File
	consts  map[string]constant
	funcs   map[string]*ast.FuncDecl   // plain functions by name
	types   map[string]bool            // declared type names (T(x) is a conversion)
	methods map[string][]*ast.FuncDecl // methods by name
	// calls lists, for each function or method name, its call sites.
	calls map[string][]callSite
	scope map[*ast.FuncDecl]*funcScope
	// results memoises each function's returned taint (nil: in progress).
	results map[*ast.FuncDecl]*taint
	// resolving guards parameter resolution against recursion (keyed
	// without the name).
	resolving map[param]bool
}

type callSite struct {
	call *ast.CallExpr
	in   *ast.FuncDecl
}

// funcScope is what a function's names mean, flow-insensitively.
type funcScope struct {
	params  map[string]int
	names   []string
	consts  map[string]constant
	assigns map[string][]ast.Expr // every value assigned to a local
	writes  map[string][]ast.Expr // every piece written to a local strings.Builder
	opaque  map[string]bool       // locals bound by range or multi-value calls
	evaling map[string]bool
}

func newChecker(fset *token.FileSet, files []*ast.File) *checker {
	c := &checker{fset: fset, files: files, consts: map[string]constant{}, funcs: map[string]*ast.FuncDecl{},
		methods: map[string][]*ast.FuncDecl{}, types: map[string]bool{}, calls: map[string][]callSite{}, scope: map[*ast.FuncDecl]*funcScope{},
		results: map[*ast.FuncDecl]*taint{}, resolving: map[param]bool{}}
	var pending []*ast.ValueSpec
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						if d.Tok == token.CONST {
							pending = append(pending, s)
						}
					case *ast.TypeSpec:
						c.types[s.Name.Name] = true
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil {
					c.funcs[d.Name.Name] = d
				} else {
					c.methods[d.Name.Name] = append(c.methods[d.Name.Name], d)
				}
			}
		}
	}
	c.resolveConsts(pending, c.consts)
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					if name := calleeName(call); name != "" {
						c.calls[name] = append(c.calls[name], callSite{call, fn})
					}
				}
				return true
			})
		}
	}
	return c
}

// calleeName is the name a call resolves to in this package: f(...) or
// x.m(...) (a method, or a function of another package, which has no
// declaration here and so is never resolved).
func calleeName(call *ast.CallExpr) string {
	switch f := call.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

// resolveConsts evaluates constant declarations into into until nothing
// changes (they may refer to each other in any order; a function's
// constants may use the package's).
func (c *checker) resolveConsts(specs []*ast.ValueSpec, into map[string]constant) {
	lookup := func(name string) (constant, bool) {
		if k, ok := into[name]; ok {
			return k, true
		}
		k, ok := c.consts[name]
		return k, ok
	}
	for changed := true; changed; {
		changed = false
		for _, s := range specs {
			for i, name := range s.Names {
				if _, done := into[name.Name]; done {
					continue
				}
				if i >= len(s.Values) {
					// iota continuation: a number.
					into[name.Name] = constant{}
					changed = true
					continue
				}
				if k, ok := constValue(s.Values[i], lookup); ok {
					into[name.Name] = k
					changed = true
				}
			}
		}
	}
}

func constValue(e ast.Expr, lookup func(string) (constant, bool)) (constant, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			s, err := strconv.Unquote(e.Value)
			return constant{text: s, isString: true}, err == nil
		}
		return constant{}, true
	case *ast.Ident:
		if e.Name == "iota" || e.Name == "true" || e.Name == "false" {
			return constant{}, true
		}
		return lookup(e.Name)
	case *ast.ParenExpr:
		return constValue(e.X, lookup)
	case *ast.BinaryExpr:
		x, ok1 := constValue(e.X, lookup)
		y, ok2 := constValue(e.Y, lookup)
		if !ok1 || !ok2 {
			return constant{}, false
		}
		if e.Op == token.ADD && x.isString {
			return constant{text: x.text + y.text, isString: true}, true
		}
		return constant{}, true
	case *ast.CallExpr:
		// A typed constant: Kind("x"), time.Duration(5).
		if len(e.Args) == 1 {
			return constValue(e.Args[0], lookup)
		}
	case *ast.SelectorExpr, *ast.UnaryExpr:
		// Another package's constant, or -1: fixed, never text here.
		return constant{}, true
	}
	return constant{}, false
}

func (c *checker) scopeOf(fn *ast.FuncDecl) *funcScope {
	if s, ok := c.scope[fn]; ok {
		return s
	}
	s := &funcScope{params: map[string]int{}, consts: map[string]constant{}, assigns: map[string][]ast.Expr{},
		writes: map[string][]ast.Expr{}, opaque: map[string]bool{}, evaling: map[string]bool{}}
	c.scope[fn] = s
	i := 0
	for _, field := range fn.Type.Params.List {
		if len(field.Names) == 0 {
			s.names = append(s.names, "_")
			i++
			continue
		}
		for _, n := range field.Names {
			s.params[n.Name] = i
			s.names = append(s.names, n.Name)
			i++
		}
	}
	if fn.Body == nil {
		return s
	}
	var constSpecs []*ast.ValueSpec
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.DeclStmt:
			gd := n.Decl.(*ast.GenDecl)
			for _, spec := range gd.Specs {
				vs, ok := spec.(*ast.ValueSpec)
				if !ok {
					continue
				}
				if gd.Tok == token.CONST {
					constSpecs = append(constSpecs, vs)
					continue
				}
				for i, name := range vs.Names {
					if i < len(vs.Values) && len(vs.Values) == len(vs.Names) {
						s.assigns[name.Name] = append(s.assigns[name.Name], vs.Values[i])
					} else if len(vs.Values) > 0 {
						s.opaque[name.Name] = true
					}
				}
			}
		case *ast.AssignStmt:
			for i, lhs := range n.Lhs {
				id, ok := lhs.(*ast.Ident)
				if !ok {
					continue
				}
				if len(n.Lhs) == len(n.Rhs) {
					s.assigns[id.Name] = append(s.assigns[id.Name], n.Rhs[i])
				} else {
					s.opaque[id.Name] = true
				}
			}
		case *ast.RangeStmt:
			for _, v := range []ast.Expr{n.Key, n.Value} {
				if id, ok := v.(*ast.Ident); ok {
					s.opaque[id.Name] = true
				}
			}
		case *ast.CallExpr:
			if b, piece := builderWrite(n); b != "" {
				s.writes[b] = append(s.writes[b], piece...)
			}
		}
		return true
	})
	c.resolveConsts(constSpecs, s.consts)
	return s
}

// builderWrite recognises b.WriteString(x), b.WriteByte(x), b.WriteRune(x),
// b.Write(x) and fmt.Fprint*(&b, ...): the builder's name and what it gets.
func builderWrite(call *ast.CallExpr) (string, []ast.Expr) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return "", nil
	}
	if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "fmt" && strings.HasPrefix(sel.Sel.Name, "Fprint") && len(call.Args) > 0 {
		if u, ok := call.Args[0].(*ast.UnaryExpr); ok && u.Op == token.AND {
			if id, ok := u.X.(*ast.Ident); ok {
				return id.Name, call.Args[1:]
			}
		}
		return "", nil
	}
	switch sel.Sel.Name {
	case "WriteString", "WriteByte", "WriteRune", "Write":
		if id, ok := sel.X.(*ast.Ident); ok {
			return id.Name, call.Args
		}
	}
	return "", nil
}

func (c *checker) text(e ast.Node) string {
	var b bytes.Buffer
	if err := format.Node(&b, c.fset, e); err != nil {
		return fmt.Sprintf("%T at %s", e, c.fset.Position(e.Pos()))
	}
	return b.String()
}

// eval is the taint of e inside fn.
func (c *checker) eval(fn *ast.FuncDecl, e ast.Expr) taint {
	s := c.scopeOf(fn)
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			v, _ := strconv.Unquote(e.Value)
			return frag(v)
		}
		return nil
	case *ast.ParenExpr:
		return c.eval(fn, e.X)
	case *ast.Ident:
		return c.evalIdent(fn, s, e)
	case *ast.BinaryExpr:
		x, y := c.eval(fn, e.X), c.eval(fn, e.Y)
		if e.Op == token.ADD {
			x.add(y)
			return x
		}
		// Arithmetic or a comparison: a number or a bool. Fixed only if
		// both sides are; it matters only if formatted into a string.
		if x.fixed() && y.fixed() {
			return nil
		}
		return value(c.text(e))
	case *ast.CallExpr:
		return c.evalCall(fn, s, e)
	case *ast.CompositeLit:
		var t taint
		for _, el := range e.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				el = kv.Value
			}
			t.add(c.eval(fn, el))
		}
		return t
	case *ast.UnaryExpr:
		if e.Op == token.SUB || e.Op == token.ADD || e.Op == token.XOR || e.Op == token.NOT {
			if c.eval(fn, e.X).fixed() {
				return nil
			}
		}
	}
	return value(c.text(e))
}

func (c *checker) evalIdent(fn *ast.FuncDecl, s *funcScope, id *ast.Ident) taint {
	name := id.Name
	if k, ok := s.consts[name]; ok {
		return constTaint(k)
	}
	if i, ok := s.params[name]; ok {
		return taint{{param: &param{fn: fn, idx: i, name: name}}}
	}
	if s.opaque[name] {
		return value(name)
	}
	if rhs, ok := s.assigns[name]; ok {
		if s.evaling[name] {
			return nil // a cycle (x = x + y): the other assignments say it all
		}
		s.evaling[name] = true
		defer delete(s.evaling, name)
		var t taint
		for _, e := range rhs {
			t.add(c.eval(fn, e))
		}
		return t
	}
	if k, ok := c.consts[name]; ok {
		return constTaint(k)
	}
	switch name {
	case "true", "false", "nil", "iota":
		return nil
	}
	return value(name)
}

func constTaint(k constant) taint {
	if k.isString {
		return frag(k.text)
	}
	return nil
}

func (c *checker) evalCall(fn *ast.FuncDecl, s *funcScope, call *ast.CallExpr) taint {
	all := func(args []ast.Expr) taint {
		var t taint
		for _, a := range args {
			t.add(c.eval(fn, a))
		}
		return t
	}
	switch f := call.Fun.(type) {
	case *ast.Ident:
		switch f.Name {
		case "string", "append":
			return all(call.Args)
		case "len", "cap":
			return value(c.text(call))
		}
		if decl, ok := c.funcs[f.Name]; ok {
			return c.substitute(fn, decl, call)
		}
		if c.types[f.Name] || f.Name == "byte" || f.Name == "rune" || strings.HasPrefix(f.Name, "int") || strings.HasPrefix(f.Name, "uint") {
			return all(call.Args) // a conversion
		}
	case *ast.ArrayType:
		return all(call.Args) // []byte(s)
	case *ast.SelectorExpr:
		if pkg, ok := f.X.(*ast.Ident); ok {
			switch {
			case pkg.Name == "fmt" && (strings.HasPrefix(f.Sel.Name, "Sprint") || f.Sel.Name == "Appendf"):
				return all(call.Args)
			case pkg.Name == "strings" && f.Sel.Name == "Repeat" && len(call.Args) == 2:
				return c.eval(fn, call.Args[0]) // the count repeats, it is not text
			case pkg.Name == "strings" && (f.Sel.Name == "Join" || f.Sel.Name == "ToUpper" || f.Sel.Name == "ToLower" || f.Sel.Name == "TrimSpace"):
				return all(call.Args)
			case pkg.Name == "strconv":
				return all(call.Args)
			}
			if f.Sel.Name == "String" && len(call.Args) == 0 {
				if pieces, ok := s.writes[pkg.Name]; ok {
					return all(pieces)
				}
			}
		}
		if ms := c.methods[f.Sel.Name]; len(ms) == 1 {
			return c.substitute(fn, ms[0], call)
		}
	}
	return value(c.text(call))
}

// substitute is the taint of a call of decl from fn: decl's returned
// taint, each of its parameters replaced by the argument passed here.
func (c *checker) substitute(fn, decl *ast.FuncDecl, call *ast.CallExpr) taint {
	var out taint
	for _, p := range c.returns(decl) {
		if p.param == nil || p.param.fn != decl {
			out = append(out, p)
			continue
		}
		i := p.param.idx
		if i >= len(call.Args) {
			continue // a variadic parameter given nothing
		}
		out.add(c.eval(fn, call.Args[i]))
		if isVariadic(decl, i) && call.Ellipsis == token.NoPos {
			for _, a := range call.Args[i+1:] {
				out.add(c.eval(fn, a))
			}
		}
	}
	return out
}

func isVariadic(decl *ast.FuncDecl, idx int) bool {
	ps := decl.Type.Params.List
	if len(ps) == 0 {
		return false
	}
	_, ok := ps[len(ps)-1].Type.(*ast.Ellipsis)
	n := 0
	for _, f := range ps {
		n += max(1, len(f.Names))
	}
	return ok && idx == n-1
}

// returns is the union of the taints decl returns, in terms of its own
// parameters.
func (c *checker) returns(decl *ast.FuncDecl) taint {
	if t, ok := c.results[decl]; ok {
		if t == nil {
			return nil // recursion: the other returns say it all
		}
		return *t
	}
	c.results[decl] = nil
	var t taint
	if decl.Body != nil {
		ast.Inspect(decl.Body, func(n ast.Node) bool {
			if _, ok := n.(*ast.FuncLit); ok {
				return false // a closure's returns are not decl's
			}
			if r, ok := n.(*ast.ReturnStmt); ok {
				for _, e := range r.Results {
					t.add(c.eval(decl, e))
				}
			}
			return true
		})
	}
	c.results[decl] = &t
	return t
}

// resolve replaces the parameters in t by what every caller in the package
// passes. A parameter of a function nothing here calls is a value: an
// outside caller may pass anything.
func (c *checker) resolve(t taint) taint {
	var out taint
	for _, p := range t {
		if p.param == nil {
			out = append(out, p)
			continue
		}
		key := param{fn: p.param.fn, idx: p.param.idx}
		if c.resolving[key] {
			continue
		}
		c.resolving[key] = true
		sites := c.calls[p.param.fn.Name.Name]
		if len(sites) == 0 {
			out = append(out, piece{value: p.param.name, why: fmt.Sprintf("a parameter of %s, which nothing in the package calls", p.param.fn.Name.Name)})
		}
		for _, site := range sites {
			if p.param.idx < len(site.call.Args) {
				out.add(c.resolve(c.eval(site.in, site.call.Args[p.param.idx])))
			}
		}
		delete(c.resolving, key)
	}
	return out
}

// run checks every place a string is assembled (a chain of +, a
// fmt.Sprint* call, a strings.Join or Repeat, a strings.Builder's String)
// and every query handed to database/sql (Exec, Query, QueryRow, Prepare and
// their Context forms), which catches a statement grown in a variable with
// +=. Each statement is reported once, where it is first found.
func (c *checker) run() []Finding {
	var out []Finding
	seen := map[token.Pos]bool{}
	report := func(fn *ast.FuncDecl, e ast.Expr) {
		if seen[e.Pos()] {
			return
		}
		t := c.resolve(c.eval(fn, e))
		if sqlish(t.fixedText()) && !t.fixed() {
			seen[e.Pos()] = true
			out = append(out, Finding{Pos: c.fset.Position(e.Pos()).String(), SQL: abbreviate(t.text()), Values: unique(t.values())})
		}
	}
	for _, f := range c.files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			var visit func(n ast.Node) bool
			visit = func(n ast.Node) bool {
				e, ok := n.(ast.Expr)
				if !ok {
					return true
				}
				if q := queryArg(e); q != nil && !c.assembles(fn, q) {
					report(fn, q)
				}
				if !c.assembles(fn, e) {
					return true
				}
				report(fn, e)
				// Inner pieces are part of this statement (or fixed);
				// only look inside calls, whose arguments may assemble
				// statements of their own.
				if call, ok := e.(*ast.CallExpr); ok {
					for _, a := range call.Args {
						ast.Inspect(a, visit)
					}
				}
				return false
			}
			ast.Inspect(fn.Body, visit)
		}
	}
	return out
}

// queryArg is the query argument of a database/sql call: x.Exec(q, ...),
// x.ExecContext(ctx, q, ...) and the like. (By name: the check has no
// types.)
func queryArg(e ast.Expr) ast.Expr {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return nil
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return nil
	}
	i := -1
	switch sel.Sel.Name {
	case "Exec", "Query", "QueryRow", "Prepare":
		i = 0
	case "ExecContext", "QueryContext", "QueryRowContext", "PrepareContext":
		i = 1
	}
	if i < 0 || i >= len(call.Args) {
		return nil
	}
	return call.Args[i]
}

func (c *checker) assembles(fn *ast.FuncDecl, e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.BinaryExpr:
		return e.Op == token.ADD
	case *ast.CallExpr:
		sel, ok := e.Fun.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		pkg, ok := sel.X.(*ast.Ident)
		if !ok {
			return false
		}
		switch {
		case pkg.Name == "fmt" && (strings.HasPrefix(sel.Sel.Name, "Sprint") || sel.Sel.Name == "Appendf"):
			return true
		case pkg.Name == "strings" && (sel.Sel.Name == "Join" || sel.Sel.Name == "Repeat"):
			return true
		case sel.Sel.Name == "String" && len(e.Args) == 0:
			_, ok := c.scopeOf(fn).writes[pkg.Name]
			return ok
		}
	}
	return false
}

func abbreviate(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}

func unique(ss []string) []string {
	slices.Sort(ss)
	return slices.Compact(ss)
}
