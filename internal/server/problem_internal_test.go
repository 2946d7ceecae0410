package server

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/reservation"
)

// answeredCodes is every error code the package's sources answer: the
// string value of each Code field of a composite literal, and the codes
// authorize returns (admin.go passes them on in a variable).
func answeredCodes(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]string{} // code -> where
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		add := func(e ast.Expr) {
			if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				code, _ := strconv.Unquote(lit.Value)
				codes[code] = fset.Position(lit.Pos()).String()
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.KeyValueExpr:
				if id, ok := n.Key.(*ast.Ident); ok && id.Name == "Code" {
					if _, lit := n.Value.(*ast.BasicLit); !lit {
						if id, ok := n.Value.(*ast.Ident); !ok || id.Name != "code" {
							t.Errorf("%s: a problem's Code that is not a string literal: list where its codes come from in answeredCodes", fset.Position(n.Pos()))
						}
					}
					add(n.Value)
				}
			case *ast.FuncDecl:
				if n.Name.Name == "authorize" {
					ast.Inspect(n.Body, func(m ast.Node) bool {
						// (identity, code, message)
						if ret, ok := m.(*ast.ReturnStmt); ok && len(ret.Results) == 3 {
							add(ret.Results[1])
						}
						return true
					})
				}
			}
			return true
		})
	}
	delete(codes, "")
	return codes
}

// Every code the server answers has an RFC 9457 title and type URI, and
// docs/api.md lists it: a new code without them fails here.
func TestEveryCodeHasATitle(t *testing.T) {
	codes := answeredCodes(t)
	if len(codes) < 30 {
		t.Fatalf("found %d codes in the sources, want every one (%v): is answeredCodes still finding them?", len(codes), slices.Sorted(maps.Keys(codes)))
	}
	docs, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	for code, where := range codes {
		title, ok := problemTitles[code]
		if !ok || strings.TrimSpace(title) == "" {
			t.Errorf("%s: code %q has no title in problemTitles", where, code)
		}
		u, err := url.Parse(ProblemType(code))
		if err != nil || !u.IsAbs() || !strings.HasSuffix(u.String(), "/"+code) {
			t.Errorf("code %q: type %q is not an absolute URI ending in the code (%v)", code, ProblemType(code), err)
		}
		if !strings.Contains(string(docs), "`"+code+"`") {
			t.Errorf("%s: code %q is not in docs/api.md", where, code)
		}
	}
	for code := range problemTitles {
		if _, ok := codes[code]; !ok {
			t.Errorf("problemTitles lists %q, which no source answers: remove it", code)
		}
	}
}

// errorTable is docs/api.md's table of error codes: status and code per
// row; each row's title must be the code's.
func errorTable(t *testing.T) []struct {
	status int
	code   string
} {
	t.Helper()
	docs, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		status int
		code   string
	}
	for _, m := range regexp.MustCompile("(?m)^\\| ([0-9]{3}) \\| `([a-z_]+)`[^|]*\\| ([^|]*) \\|").FindAllStringSubmatch(string(docs), -1) {
		status, _ := strconv.Atoi(m[1])
		if m[3] != problemTitles[m[2]] {
			t.Errorf("docs/api.md gives %q the title %q; problemTitles says %q", m[2], m[3], problemTitles[m[2]])
		}
		rows = append(rows, struct {
			status int
			code   string
		}{status, m[2]})
	}
	if len(rows) < 30 {
		t.Fatalf("docs/api.md's error table has %d rows: has its form changed?", len(rows))
	}
	return rows
}

// Every documented error is answered as an RFC 9457 problem: the media
// type application/problem+json whatever the Accept, the members type,
// title, status (the HTTP status, a number), detail and instance, and the
// stable error code and message kept beside them.
func TestEveryErrorIsAProblem(t *testing.T) {
	for _, row := range errorTable(t) {
		for _, accept := range []string{"", "application/json", "text/html"} {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest("POST", "/v1/shops/1001/reservations/cart%201", nil)
			if accept != "" {
				r.Header.Set("Accept", accept)
			}
			writeProblem(rec, r, problem{Status: row.status, Code: row.code, Message: "what went wrong", Field: "token", RetryAfter: time.Second})
			if rec.Code != row.status {
				t.Errorf("%s: status %d, want %d", row.code, rec.Code, row.status)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("%s (Accept %q): Content-Type %q, want application/problem+json", row.code, accept, ct)
			}
			if rec.Header().Get("Retry-After") != "1" {
				t.Errorf("%s: Retry-After %q, want 1", row.code, rec.Header().Get("Retry-After"))
			}
			var raw map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
				t.Fatalf("%s: %v: %s", row.code, err, rec.Body)
			}
			want := map[string]any{
				"type": ProblemType(row.code), "title": problemTitles[row.code], "status": float64(row.status),
				"detail": "what went wrong", "instance": "/v1/shops/1001/reservations/cart%201",
				"error": row.code, "message": "what went wrong", "field": "token",
			}
			for k, v := range want {
				if raw[k] != v {
					t.Errorf("%s: %q is %#v, want %#v", row.code, k, raw[k], v)
				}
			}
			if title, _ := raw["title"].(string); title == "" {
				t.Errorf("%s: no title", row.code)
			}
		}
	}
}

// The refused reserve keeps its extension members (pod, short, replayed)
// beside the problem's; its status is the HTTP status, a number.
func TestInsufficientIsAProblem(t *testing.T) {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/v1/shops/1001/reservations", nil)
	p := *insufficient("pod-a", reservation.ReserveResult{Status: reservation.StatusInsufficient,
		Short: []reservation.ShortLine{{Item: 7, Requested: 2, Unheld: 1}}, Replayed: true})
	writeProblem(rec, r, p)
	var got wire.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != http.StatusConflict || got.Error != "insufficient" || got.Pod != "pod-a" || len(got.Short) != 1 || !got.Replayed ||
		got.Type != ProblemType("insufficient") || got.Detail == "" || got.Detail != got.Message {
		t.Fatalf("insufficient: %s", rec.Body)
	}
}
