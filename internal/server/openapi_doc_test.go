package server_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/seed31b0e981/reservoir/docs"
	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/internal/wire"
)

// loadOpenAPI loads docs/openapi.yaml as the binary embeds it and fails
// the test unless it is a valid OpenAPI 3.1 document.
func loadOpenAPI(t testing.TB) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(docs.OpenAPI)
	if err != nil {
		t.Fatalf("docs/openapi.yaml does not load: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() || !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Fatalf("docs/openapi.yaml is OpenAPI %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context, openapi3.EnableSchemaPatternValidation()); err != nil {
		t.Fatalf("docs/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// The document loads and validates, and its list of error codes is the
// server's: a code added to the server and not to the document (or left
// in the document after the server dropped it) fails here.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	var documented []string
	for _, v := range doc.Components.Schemas["ErrorCode"].Value.Enum {
		documented = append(documented, fmt.Sprint(v))
	}
	served := server.ProblemCodes()
	sort.Strings(documented)
	sort.Strings(served)
	if !slices.Equal(documented, served) {
		t.Errorf("ErrorCode in docs/openapi.yaml lists\n  %v\nthe server answers\n  %v", documented, served)
	}
}

// wireRoots are the internal/wire types a route sends or takes; every
// type they reach is a schema of the document under its Go name.
var wireRoots = []any{
	wire.ReserveRequest{}, wire.Reservation{}, wire.ClaimResponse{}, wire.ReleaseResponse{},
	wire.AvailabilityResponse{}, wire.AdjustRequest{}, wire.AdjustResponse{}, wire.Problem{},
	wire.Health{}, wire.Ready{}, wire.RolloutStatus{}, wire.History{}, wire.AdvanceRequest{},
	wire.AdvanceResponse{}, wire.KillRequest{}, wire.KillResponse{}, wire.Diffs{}, wire.Stats{},
	wire.Series{}, wire.Reconciliation{},
}

// requestTypes are the bodies a client sends: a member left out of one
// takes its default, so the document's required list is the API's, not
// the encoder's (docs/api.md gives each).
var requestTypes = map[string][]string{
	"ReserveRequest": {"lines", "token"},
	"Line":           {"item", "locations", "quantity"},
	"AdjustRequest":  nil,
	"KillRequest":    {"reason", "scope"},
	"AdvanceRequest": nil,
}

// Each schema of the document is its internal/wire type, member for
// member: the same JSON names (so no Go field name and no member the
// type lacks), required exactly when the encoder always writes it (not
// omitempty or omitzero), no other member allowed, and each member's
// type the one its Go type encodes as. The live test checks the answers
// the server sends; this checks what no answer in it happens to carry.
func TestOpenAPISchemasAreTheWireTypes(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || typ == reflect.TypeFor[time.Time]() || seen[typ] {
			return
		}
		seen[typ] = true
		ref := doc.Components.Schemas[typ.Name()]
		if ref == nil || ref.Value == nil {
			t.Errorf("wire.%s has no schema %s in docs/openapi.yaml", typ.Name(), typ.Name())
			return
		}
		s := ref.Value
		if s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
			t.Errorf("schema %s allows members it does not list: want additionalProperties: false", typ.Name())
		}
		var names, required []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				t.Errorf("wire.%s.%s has no JSON name", typ.Name(), f.Name)
				continue
			}
			names = append(names, name)
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
				required = append(required, name)
			}
			p := s.Properties[name]
			if p == nil || p.Value == nil {
				t.Errorf("schema %s lacks %q (wire.%s.%s)", typ.Name(), name, typ.Name(), f.Name)
				continue
			}
			if want, got := jsonTypes(f.Type, opts), schemaTypes(p.Value); !slices.Equal(want, got) {
				t.Errorf("schema %s.%s is %v, wire.%s.%s encodes as %v", typ.Name(), name, got, typ.Name(), f.Name, want)
			}
			walk(f.Type)
		}
		for name := range s.Properties {
			if !slices.Contains(names, name) {
				t.Errorf("schema %s has %q, which wire.%s does not", typ.Name(), name, typ.Name())
			}
		}
		if r, ok := requestTypes[typ.Name()]; ok {
			required = r
		}
		got := slices.Clone(s.Required)
		sort.Strings(got)
		sort.Strings(required)
		if !slices.Equal(got, required) {
			t.Errorf("schema %s requires %v, want %v", typ.Name(), got, required)
		}
	}
	for _, v := range wireRoots {
		walk(reflect.TypeOf(v))
	}
	if len(seen) < 40 {
		t.Fatalf("walked only %d wire types: the roots are wrong", len(seen))
	}
}

// jsonTypes is the JSON Schema types a Go type of internal/wire encodes
// as: a pointer without omitempty may be null.
func jsonTypes(typ reflect.Type, opts string) []string {
	var out []string
	if typ.Kind() == reflect.Pointer {
		if !strings.Contains(opts, "omitempty") {
			out = append(out, "null")
		}
		typ = typ.Elem()
	}
	switch {
	case typ == reflect.TypeFor[time.Time]():
		out = append(out, "string")
	case typ.Kind() == reflect.String:
		out = append(out, "string")
	case typ.Kind() == reflect.Bool:
		out = append(out, "boolean")
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Uint64:
		out = append(out, "integer")
	case typ.Kind() == reflect.Float64 || typ.Kind() == reflect.Float32:
		out = append(out, "number")
	case typ.Kind() == reflect.Slice:
		out = append(out, "array")
	case typ.Kind() == reflect.Map || typ.Kind() == reflect.Struct:
		out = append(out, "object")
	}
	sort.Strings(out)
	return out
}

// schemaTypes is the types a schema allows, following a $ref and an
// anyOf of a $ref and null.
func schemaTypes(s *openapi3.Schema) []string {
	out := slices.Clone(s.Type.Slice())
	for _, alt := range s.AnyOf {
		out = append(out, schemaTypes(alt.Value)...)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// docPath is the document's path of a net/http pattern's path: the same
// {wildcards}, and "/{$}" (the root only) as "/".
func docPath(pattern string) (method, path string) {
	method, path, _ = strings.Cut(pattern, " ")
	return method, strings.TrimSuffix(path, "{$}")
}

// Every route the server registers is in the document, under the tag of
// its listener, and every operation the document lists is a route the
// server registers: the list comes from the server (Routes), so a route
// added without its contract, or a contract left after its route went,
// fails here.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	h := setup(t, options{noHTTP: true})
	routes := h.srv.Routes()
	if len(routes) < 20 {
		t.Fatalf("the server lists %d routes: %v", len(routes), routes)
	}
	served := map[string]bool{}
	for _, r := range routes {
		method, path := docPath(r.Pattern)
		served[method+" "+path] = true
		item := doc.Paths.Find(path)
		if item == nil || item.GetOperation(method) == nil {
			t.Errorf("%s (%s listener) is not in docs/openapi.yaml", r.Pattern, r.Listener)
			continue
		}
		op := item.GetOperation(method)
		want := map[string]string{server.CheckoutListener: "checkout", server.AdminListener: "admin"}[r.Listener]
		if !slices.Contains(op.Tags, want) && !(r.Listener == server.AdminListener && slices.Contains(op.Tags, "operations")) {
			t.Errorf("%s is served on the %s listener; docs/openapi.yaml tags it %v", r.Pattern, r.Listener, op.Tags)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !served[method+" "+path] {
				t.Errorf("docs/openapi.yaml lists %s %s, which the server does not serve", method, path)
			}
		}
	}
	// And the admin listener serves the document the binary embeds.
	hs := httptest.NewServer(h.srv.AdminHandler())
	t.Cleanup(hs.Close)
	res, err := http.Get(hs.URL + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil || res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/yaml" || !bytes.Equal(body, docs.OpenAPI) {
		t.Errorf("GET /openapi.yaml on the admin listener: %d %q, %d bytes (want the %d embedded), %v", res.StatusCode, res.Header.Get("Content-Type"), len(body), len(docs.OpenAPI), err)
	}
}
