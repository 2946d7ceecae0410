// Package sqlcheck is a go/analysis analyzer that reports SQL built from
// values. The project's rule is that every value travels as a parameter: a
// statement is made of constants only, possibly through helpers that
// assemble constants (mysqlstore's tag(caller), with caller always a
// constant, or repeatJoin("?", ",", n)). cmd/sqlcheck runs it over the
// repository in scripts/test.
//
// It checks two places. Every query handed to a method of database/sql's
// shape (Exec, Query, QueryRow, Prepare and their Context forms, on any
// type, so the stores' connection interfaces count) must be fixed. So must
// every string assembled with +, fmt.Sprint*, strings.Join or Repeat, or a
// strings.Builder, whose constant pieces read as SQL: a statement built
// here and sent from elsewhere is caught too.
//
// Fixed is decided with type information, never by reading names: a
// constant expression has a value (types.TypeAndValue.Value). A variable,
// a struct field (whatever value holds it) or a builder is fixed when all
// that the package gives it is; a call of one of the package's functions
// when all it returns is; a parameter when the function is unexported,
// only ever called directly, and every call passes a fixed argument. It is
// flow-insensitive, so it errs on the side of reporting. A line that must
// splice a value no parameter can stand for (a database's name) carries
// "//sqlcheck:ok REASON".
package sqlcheck

import (
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

// Analyzer reports SQL statements built from values.
var Analyzer = &analysis.Analyzer{
	Name: "sqlcheck",
	Doc:  "report SQL statements built from values instead of constants and placeholders",
	Run:  run,
}

// sqlish reports whether constant text reads as SQL: a keyword in capitals
// (the project writes its SQL so), or a statement verb in any case at its
// start with a clause keyword after it (English like "with the mirror" is
// not SQL). It only chooses which assembled strings are checked: a query
// handed to the database is checked whatever it reads like.
func sqlish(text string) bool {
	return sqlKeywords.MatchString(text) || sqlStart.MatchString(text)
}

var (
	sqlKeywords = regexp.MustCompile(`\b(SELECT|INSERT|UPDATE|DELETE|REPLACE|FROM|WHERE|VALUES|SET|LIMIT|JOIN|UNION|ORDER BY|GROUP BY|CREATE|DROP|ALTER|TRUNCATE)\b`)
	sqlStart    = regexp.MustCompile(`(?is)^\s*(/\*.*?\*/\s*)?(select|insert|update|delete|replace|create|drop|alter|truncate|with)\s.*\b(from|into|set|table|database|where|as)\b`)
)

type checker struct {
	info    *types.Info
	pkg     *types.Package
	decls   map[*types.Func]*ast.FuncDecl
	calls   map[*types.Func][]*ast.CallExpr // the direct calls of the package's functions
	escaped map[*types.Func]bool            // used as a value: its callers are unknown
	gives   map[types.Object][]part         // what each variable, field or builder is given
	params  map[*types.Var]param            // fn nil: a receiver's or a closure's, unknown
	results map[*types.Var]*ast.FuncDecl
	memo    map[types.Object]bool
	busy    map[types.Object]bool
	assumed int // cycles cut by assuming fixed: a result that relied on one is not memoised
}

// part is what a variable is given: e, or the i-th value of e when i >= 0
// (a, b := f()).
type part struct {
	e ast.Expr
	i int
}

type param struct {
	fn       *types.Func
	idx      int
	variadic bool
}

func run(pass *analysis.Pass) (any, error) {
	c := &checker{info: pass.TypesInfo, pkg: pass.Pkg, decls: map[*types.Func]*ast.FuncDecl{},
		calls: map[*types.Func][]*ast.CallExpr{}, escaped: map[*types.Func]bool{}, gives: map[types.Object][]part{},
		params: map[*types.Var]param{}, results: map[*types.Var]*ast.FuncDecl{}, memo: map[types.Object]bool{}, busy: map[types.Object]bool{}}
	allowed := map[string]bool{} // file:line of each //sqlcheck:ok with a reason
	for _, f := range pass.Files {
		c.collect(f)
		for _, g := range f.Comments {
			for _, cm := range g.List {
				if reason, ok := strings.CutPrefix(cm.Text, "//sqlcheck:ok "); ok && strings.TrimSpace(reason) != "" {
					allowed[line(pass.Fset, cm.Pos())] = true
				}
			}
		}
	}
	reported := map[token.Pos]bool{}
	report := func(e ast.Expr, what string) {
		if !reported[e.Pos()] && !allowed[line(pass.Fset, e.Pos())] {
			reported[e.Pos()] = true
			pass.Reportf(e.Pos(), "%s built from a value: %s", what, types.ExprString(c.culprit(e)))
		}
	}
	for _, f := range pass.Files {
		ast.Inspect(f, func(n ast.Node) bool {
			e, ok := n.(ast.Expr)
			if !ok || reported[e.Pos()] {
				return !ok
			}
			if q := c.queryArg(e); q != nil && !c.fixed(q) {
				report(q, "query")
			}
			if c.assembles(e) && sqlish(c.constText(e)) && !c.fixed(e) {
				report(e, "SQL")
				return false // its pieces are part of this statement
			}
			return true
		})
	}
	return nil, nil
}

func line(fset *token.FileSet, pos token.Pos) string {
	p := fset.Position(pos)
	return p.Filename + ":" + strconv.Itoa(p.Line)
}

// collect records the package's functions, their calls, and all that is
// given to a variable, a field or a builder.
func (c *checker) collect(f *ast.File) {
	called := map[*ast.Ident]bool{}
	give := func(lhs, rhs ast.Expr, i int) {
		if obj := c.target(lhs); obj != nil {
			c.gives[obj] = append(c.gives[obj], part{rhs, i})
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			fn := c.info.Defs[n.Name].(*types.Func)
			sig := fn.Signature()
			c.decls[fn] = n
			if sig.Recv() != nil {
				c.params[sig.Recv()] = param{}
			}
			for i := range sig.Params().Len() {
				c.params[sig.Params().At(i)] = param{fn, i, sig.Variadic() && i == sig.Params().Len()-1}
			}
			for i := range sig.Results().Len() {
				c.results[sig.Results().At(i)] = n
			}
		case *ast.FuncLit:
			for _, field := range n.Type.Params.List {
				for _, name := range field.Names {
					c.params[c.info.Defs[name].(*types.Var)] = param{}
				}
			}
		case *ast.CallExpr:
			switch fn := typeutil.StaticCallee(c.info, n); {
			case fn == nil:
			case fn.Pkg() == c.pkg:
				c.calls[fn.Origin()] = append(c.calls[fn.Origin()], n)
				if id, ok := ast.Unparen(n.Fun).(*ast.Ident); ok {
					called[id] = true
				} else if sel, ok := ast.Unparen(n.Fun).(*ast.SelectorExpr); ok {
					called[sel.Sel] = true
				}
			case isBuilder(fn) && strings.HasPrefix(fn.Name(), "Write"):
				for _, a := range n.Args {
					give(n.Fun.(*ast.SelectorExpr).X, a, -1) // a builder holds what is written to it
				}
			case strings.HasPrefix(fn.FullName(), "fmt.Fprint"):
				for _, a := range n.Args[1:] {
					give(n.Args[0], a, -1)
				}
			}
		case *ast.AssignStmt:
			for i, lhs := range n.Lhs {
				if len(n.Lhs) == len(n.Rhs) {
					give(lhs, n.Rhs[i], -1)
				} else {
					give(lhs, n.Rhs[0], i)
				}
			}
		case *ast.ValueSpec:
			for i, name := range n.Names {
				if len(n.Names) == len(n.Values) {
					give(name, n.Values[i], -1)
				} else if len(n.Values) > 0 {
					give(name, n.Values[0], i)
				}
			}
		case *ast.RangeStmt: // an element (or a key) of a fixed collection is fixed
			for _, v := range []ast.Expr{n.Key, n.Value} {
				if v != nil {
					give(v, n.X, -1)
				}
			}
		case *ast.CompositeLit: // a struct literal gives its fields
			if st, ok := types.Unalias(c.info.TypeOf(n)).Underlying().(*types.Struct); ok {
				for i, el := range n.Elts {
					var field types.Object = st.Field(i)
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						field, el = c.info.ObjectOf(kv.Key.(*ast.Ident)), kv.Value
					}
					c.gives[field] = append(c.gives[field], part{el, -1})
				}
			}
		}
		return true
	})
	for id, obj := range c.info.Uses {
		if fn, ok := obj.(*types.Func); ok && fn.Pkg() == c.pkg && !called[id] && id.Pos() >= f.Pos() && id.Pos() < f.End() {
			c.escaped[fn.Origin()] = true
		}
	}
}

// target is what an assignment to e changes: a variable, a field (in
// whatever value), or the variable behind an element or a pointer.
func (c *checker) target(e ast.Expr) types.Object {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		if obj := c.info.ObjectOf(e); obj != nil && obj.Name() != "_" {
			return obj
		}
	case *ast.SelectorExpr:
		return c.info.ObjectOf(e.Sel)
	case *ast.IndexExpr, *ast.StarExpr, *ast.UnaryExpr:
		return c.target(inner(e))
	}
	return nil
}

// inner is the operand whose strings an element, a slice, a dereference,
// an address, a type assertion or an arithmetic operation carries.
func inner(e ast.Expr) ast.Expr {
	switch e := e.(type) {
	case *ast.IndexExpr: // the index is not text
		return e.X
	case *ast.SliceExpr:
		return e.X
	case *ast.StarExpr:
		return e.X
	case *ast.UnaryExpr:
		return e.X
	case *ast.TypeAssertExpr:
		return e.X
	}
	return nil
}

// fixed reports whether every string that e may hold comes from constants.
func (c *checker) fixed(e ast.Expr) bool {
	e = ast.Unparen(e)
	if tv := c.info.Types[e]; tv.Value != nil || tv.IsNil() || tv.IsType() {
		return true
	}
	switch e := e.(type) {
	case *ast.Ident:
		return c.objFixed(c.info.ObjectOf(e))
	case *ast.SelectorExpr:
		return c.objFixed(c.info.ObjectOf(e.Sel))
	case *ast.BinaryExpr:
		return c.fixed(e.X) && c.fixed(e.Y)
	case *ast.CompositeLit:
		for _, el := range e.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				el = kv.Value
			}
			if !c.fixed(el) {
				return false
			}
		}
		return true
	case *ast.CallExpr:
		return c.callFixed(e)
	}
	return inner(e) != nil && c.fixed(inner(e))
}

func (c *checker) callFixed(call *ast.CallExpr) bool {
	if c.info.Types[call.Fun].IsType() { // a conversion
		return c.fixed(call.Args[0])
	}
	switch fn := typeutil.Callee(c.info, call).(type) {
	case *types.Builtin: // append, min, max; len and cap count values
		return fn.Name() != "len" && fn.Name() != "cap" && c.allFixed(call.Args)
	case *types.Func:
		switch name := fn.FullName(); {
		case c.decls[fn.Origin()] != nil:
			return c.objFixed(fn.Origin().Signature().Results().At(0))
		case isBuilder(fn) && fn.Name() == "String":
			return c.fixed(call.Fun.(*ast.SelectorExpr).X)
		case strings.HasPrefix(name, "fmt.Sprint"), name == "fmt.Appendf", strings.HasPrefix(name, "strconv."):
			return c.allFixed(call.Args)
		case strings.HasPrefix(name, "strings."):
			for _, a := range call.Args { // a count (Repeat's) is not text
				if t, ok := c.info.TypeOf(a).Underlying().(*types.Basic); !(ok && t.Info()&types.IsInteger != 0) && !c.fixed(a) {
					return false
				}
			}
			return true
		}
	}
	return false
}

func (c *checker) allFixed(es []ast.Expr) bool {
	for _, e := range es {
		if !c.fixed(e) {
			return false
		}
	}
	return true
}

func (c *checker) partsFixed(ps []part) bool {
	for _, p := range ps {
		if p.i < 0 && !c.fixed(p.e) || p.i >= 0 && !c.tupleFixed(p.e, p.i) {
			return false
		}
	}
	return true
}

// tupleFixed: the i-th value of e (a call of several results, or v, ok :=
// m[k]) is fixed.
func (c *checker) tupleFixed(e ast.Expr, i int) bool {
	if call, ok := ast.Unparen(e).(*ast.CallExpr); ok {
		fn := typeutil.StaticCallee(c.info, call)
		return fn != nil && c.decls[fn.Origin()] != nil && c.objFixed(fn.Origin().Signature().Results().At(i))
	}
	return i > 0 || c.fixed(e)
}

// objFixed: a constant, or a variable all that is given to it is fixed
// (memoised; a cycle, as in q += x, is cut by assuming fixed, since the
// other assignments decide).
func (c *checker) objFixed(obj types.Object) bool {
	switch obj := obj.(type) {
	case *types.Const, *types.Nil:
		return true
	case *types.Var:
		if c.busy[obj] {
			c.assumed++
			return true
		}
		if v, ok := c.memo[obj]; ok {
			return v
		}
		c.busy[obj] = true
		before := c.assumed
		ok := c.varFixed(obj)
		delete(c.busy, obj)
		if !ok || c.assumed == before {
			c.memo[obj] = ok
		}
		return ok
	}
	return false // a function value
}

func (c *checker) varFixed(v *types.Var) bool {
	if decl := c.results[v]; decl != nil {
		return c.resultFixed(v, decl)
	}
	if p, ok := c.params[v]; ok {
		if p.fn != nil && c.queryIndex(p.fn) == p.idx {
			return true // a wrapper's query is checked where the wrapper is called
		}
		if p.fn == nil || p.fn.Exported() || c.escaped[p.fn] || len(c.calls[p.fn]) == 0 {
			return false // called from elsewhere, or not at all: anything may come
		}
		for _, call := range c.calls[p.fn] {
			args := call.Args[min(p.idx, len(call.Args)):]
			if !p.variadic || call.Ellipsis.IsValid() {
				args = args[:min(1, len(args))]
			}
			if !c.allFixed(args) {
				return false
			}
		}
		return true
	}
	if v.Pkg() != c.pkg || v.Exported() && (v.IsField() || v.Parent() == c.pkg.Scope()) {
		return false // set elsewhere
	}
	return c.partsFixed(c.gives[v])
}

// resultFixed: all that decl returns as its result v is fixed (a
// closure's returns are the closure's).
func (c *checker) resultFixed(v *types.Var, decl *ast.FuncDecl) bool {
	results := c.info.Defs[decl.Name].(*types.Func).Signature().Results()
	i := 0
	for results.At(i) != v {
		i++
	}
	ok := c.partsFixed(c.gives[v]) // a named result
	ast.Inspect(decl.Body, func(n ast.Node) bool {
		if r, isReturn := n.(*ast.ReturnStmt); isReturn && len(r.Results) == results.Len() {
			ok = ok && c.fixed(r.Results[i])
		} else if isReturn && len(r.Results) == 1 { // return f(), f returning as many
			ok = ok && c.tupleFixed(r.Results[0], i)
		}
		_, isLit := n.(*ast.FuncLit)
		return ok && !isLit
	})
	return ok
}

// queryIndex is the position of the query among fn's parameters when fn
// has database/sql's shape (Exec(query string, ...), ExecContext(ctx,
// query string, ...) and the like), else -1.
func (c *checker) queryIndex(fn *types.Func) int {
	i, ok := queryParam[fn.Name()]
	if ps := fn.Signature().Params(); !ok || i >= ps.Len() || !types.Identical(ps.At(i).Type(), types.Typ[types.String]) {
		return -1
	}
	return i
}

var queryParam = map[string]int{"Exec": 0, "Query": 0, "QueryRow": 0, "Prepare": 0,
	"ExecContext": 1, "QueryContext": 1, "QueryRowContext": 1, "PrepareContext": 1}

// queryArg is the query that e, a call, hands to the database, if any.
func (c *checker) queryArg(e ast.Expr) ast.Expr {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return nil
	}
	if fn, ok := typeutil.Callee(c.info, call).(*types.Func); ok {
		if i := c.queryIndex(fn); i >= 0 && i < len(call.Args) {
			return call.Args[i]
		}
	}
	return nil
}

// assembles reports whether e puts a string together: a +, fmt.Sprint*,
// strings.Join or Repeat, or a builder's String.
func (c *checker) assembles(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.BinaryExpr:
		t, ok := c.info.TypeOf(e).Underlying().(*types.Basic)
		return e.Op == token.ADD && ok && t.Info()&types.IsString != 0
	case *ast.CallExpr:
		fn, ok := typeutil.Callee(c.info, e).(*types.Func)
		if !ok {
			return false
		}
		switch name := fn.FullName(); name {
		case "fmt.Appendf", "strings.Join", "strings.Repeat":
			return true
		default:
			return strings.HasPrefix(name, "fmt.Sprint") || isBuilder(fn) && fn.Name() == "String"
		}
	}
	return false
}

// constText is the constant text e is assembled from (for a builder's
// String, what was written to it), the values left out.
func (c *checker) constText(e ast.Expr) string {
	var b strings.Builder
	var walk func(n ast.Node) bool
	walk = func(n ast.Node) bool {
		if x, ok := n.(ast.Expr); ok {
			if tv := c.info.Types[x]; tv.Value != nil && tv.Value.Kind() == constant.String {
				b.WriteString(constant.StringVal(tv.Value))
				return false
			}
			if fn := calleeFunc(c.info, x); fn != nil && isBuilder(fn) && fn.Name() == "String" {
				for _, w := range c.gives[c.target(x.(*ast.CallExpr).Fun.(*ast.SelectorExpr).X)] {
					ast.Inspect(w.e, walk)
				}
			}
		}
		return true
	}
	ast.Inspect(e, walk)
	return b.String()
}

// culprit is the first piece of e that is not fixed, to name in a report.
func (c *checker) culprit(e ast.Expr) ast.Expr {
	switch x := ast.Unparen(e).(type) {
	case *ast.BinaryExpr:
		if !c.fixed(x.X) {
			return c.culprit(x.X)
		}
		return c.culprit(x.Y)
	case *ast.CallExpr:
		if fn := calleeFunc(c.info, x); c.assembles(x) && !isBuilder(fn) {
			for _, a := range x.Args {
				if !c.fixed(a) {
					return c.culprit(a)
				}
			}
		}
	}
	return e
}

func calleeFunc(info *types.Info, e ast.Expr) *types.Func {
	if call, ok := e.(*ast.CallExpr); ok {
		fn, _ := typeutil.Callee(info, call).(*types.Func)
		return fn
	}
	return nil
}

// isBuilder: a method of strings.Builder or bytes.Buffer.
func isBuilder(fn *types.Func) bool {
	if fn == nil {
		return false
	}
	name := fn.FullName()
	return strings.HasPrefix(name, "(*strings.Builder).") || strings.HasPrefix(name, "(*bytes.Buffer).")
}
