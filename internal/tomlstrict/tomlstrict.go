// Package tomlstrict decodes the TOML files reservoir reads (the topology,
// the plan, the clients file) strictly: a key the target does not have is
// an error naming it, because a typo must not silently route traffic,
// skip a gate or drop a client's restriction.
//
// An unknown key is named once per place it is written, with its array
// index (pods[1].redis_adr, not pods.redis_adr twice), its line, and the
// key it most likely meant (did you mean redis_addr?). DecodeLines also
// says where every key is, so that a caller's own checks can name the
// line of the field they refuse.
package tomlstrict

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/seed31b0e981/reservoir/internal/suggest"
)

// Decode decodes data into v and refuses keys v has no field for: the
// error is then an *UnknownKeysError (v is decoded all the same). A
// document that does not parse, or a value of the wrong type, is the TOML
// library's error, which names the line.
func Decode(data []byte, v any) error {
	_, err := DecodeLines(data, v)
	return err
}

// DecodeLines is Decode, and where each key of the document is.
func DecodeLines(data []byte, v any) (*Lines, error) {
	md, err := toml.Decode(string(data), v)
	if err != nil {
		return nil, err
	}
	lines, indexed := locate(md, string(data))
	und := md.Undecoded()
	if len(und) == 0 {
		return lines, nil
	}
	unknown := map[string]bool{}
	for _, k := range und {
		unknown[k.String()] = true
	}
	root := reflect.TypeOf(v)
	var e UnknownKeysError
	var reported []string // indexed keys named already: their keys are not named again
	for i, k := range md.Keys() {
		if !unknown[k.String()] {
			continue
		}
		key := indexed[i]
		if under(key, reported) {
			continue
		}
		reported = append(reported, key)
		e.Keys = append(e.Keys, UnknownKey{Key: key, Line: lines.Line(key), Hint: hint(root, k, lines)})
	}
	return lines, &e
}

// under reports whether key is one of keys or inside one of them.
func under(key string, keys []string) bool {
	for _, k := range keys {
		if key == k || strings.HasPrefix(key, k+".") || strings.HasPrefix(key, k+"[") {
			return true
		}
	}
	return false
}

// UnknownKey is a key of the document that the target has no field for.
type UnknownKey struct {
	// Key is the key as a path with array indexes: "pods[1].redis_adr".
	Key string
	// Line is its line, from 1; 0 when not known (a key of an inline
	// table).
	Line int
	// Hint is what it most likely meant ("did you mean redis_addr?", or
	// where a key of the top level goes), or "".
	Hint string
}

func (k UnknownKey) String() string {
	s := "unknown key " + k.Key
	if k.Line > 0 {
		s = fmt.Sprintf("line %d: %s", k.Line, s)
	}
	if k.Hint != "" {
		s += "; " + k.Hint
	}
	return s
}

// UnknownKeysError is the keys of a document that its target has no field
// for, in the document's order, each where it is written (a key under an
// unknown table is not named again).
type UnknownKeysError struct {
	Keys []UnknownKey
}

func (e *UnknownKeysError) Error() string {
	out := make([]string, len(e.Keys))
	for i, k := range e.Keys {
		out[i] = k.String()
	}
	return strings.Join(out, "\n")
}

// Lines says on which line each key of a document is.
type Lines struct {
	at    map[string]int
	first int // the first table header's line (0: none)
}

// Line returns the line (from 1) of key, written as a path with array
// indexes: "control_dsn", "pods[1]" (the line of the second [[pods]]),
// "pods[1].mysql_dsn". A key the document does not hold is looked for
// without its last part, and so on: a field left out of a pod is on its
// [[pods]] line. 0 when nothing is found.
func (l *Lines) Line(key string) int {
	if l == nil {
		return 0
	}
	for key != "" {
		if n, ok := l.at[key]; ok {
			return n
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			return 0
		}
		key = key[:i]
	}
	return 0
}

// locate finds the line of every key of md (in md.Keys()'s order) in
// doc, and names each with its array indexes (indexed[i] is md.Keys()[i]'s).
func locate(md toml.MetaData, doc string) (*Lines, []string) {
	keys := md.Keys()
	found := scan(doc)
	l := &Lines{at: map[string]int{}}
	for _, f := range found {
		if f.header {
			l.first = f.line
			break
		}
	}
	indexed := make([]string, len(keys))
	counts := map[string]int{} // array of tables (indexed) -> entries so far
	next, last := 0, 0
	for i, k := range keys {
		var b strings.Builder
		for j := range k {
			if j > 0 {
				b.WriteByte('.')
			}
			b.WriteString(toml.Key{k[j]}.String())
			if md.Type(k[:j+1]...) == "ArrayHash" {
				base := b.String()
				if j == len(k)-1 {
					counts[base]++
				}
				fmt.Fprintf(&b, "[%d]", max(counts[base]-1, 0))
			}
		}
		indexed[i] = b.String()
		// The document's keys come in md.Keys()'s order: each is the next
		// one written with its name. A key written inside an inline table
		// is not on a line of its own: it gets its table's line.
		line := last
		plain := k.String()
		for j := next; j < len(found); j++ {
			if found[j].key == plain {
				line, next = found[j].line, j+1
				break
			}
		}
		last = line
		if _, seen := l.at[indexed[i]]; !seen && line > 0 {
			l.at[indexed[i]] = line
		}
	}
	return l, indexed
}

// hint says what the unknown key k most likely meant: the field of its
// table closest to it, or, for a key of the top level written below a
// table header (which makes it that table's), where it goes.
func hint(root reflect.Type, k toml.Key, lines *Lines) string {
	name := k[len(k)-1]
	if len(k) > 1 {
		if top := fieldNames(root); contains(top, name) {
			where := "above the first table"
			if lines.first > 0 {
				where = fmt.Sprintf("above the first table (line %d)", lines.first)
			}
			return fmt.Sprintf("%s is a top-level key: below a [table] header it belongs to that table; move it %s", name, where)
		}
	}
	t := root
	for _, part := range k[:len(k)-1] {
		if t = fieldType(t, part); t == nil {
			return ""
		}
	}
	if m := suggest.Closest(name, fieldNames(t)); m != "" {
		return fmt.Sprintf("did you mean %s?", m)
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// elem is t without its pointers, slices and arrays: the type a TOML
// table or array of tables decodes into.
func elem(t reflect.Type) reflect.Type {
	for t != nil {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			t = t.Elem()
		default:
			return t
		}
	}
	return nil
}

// tomlName is the key a struct field decodes ("" for none).
func tomlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	switch name {
	case "-":
		return ""
	case "":
		return f.Name
	}
	return name
}

// fieldNames lists the keys t's struct decodes.
func fieldNames(t reflect.Type) []string {
	t = elem(t)
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := 0; i < t.NumField(); i++ {
		if n := tomlName(t.Field(i)); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// fieldType is the type of t's field that decodes key (matched as the
// TOML library does: exactly, else ignoring case), or nil.
func fieldType(t reflect.Type, key string) reflect.Type {
	t = elem(t)
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var fold reflect.Type
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		switch n := tomlName(f); {
		case n == key:
			return f.Type
		case fold == nil && strings.EqualFold(n, key):
			fold = f.Type
		}
	}
	return fold
}
