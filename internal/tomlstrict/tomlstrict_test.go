package tomlstrict

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

type doc struct {
	Name string `toml:"name"`
	Subs []struct {
		ID    int `toml:"id"`
		Inner struct {
			Limit int `toml:"limit"`
		} `toml:"inner"`
	} `toml:"subs"`
}

func TestDecodeRefusesUnknownKeys(t *testing.T) {
	var v doc
	if err := Decode([]byte("name = \"a\"\n[[subs]]\nid = 1\n"), &v); err != nil || v.Name != "a" || len(v.Subs) != 1 {
		t.Fatalf("a valid document: %v %+v", err, v)
	}
	err := Decode([]byte("name = \"a\"\nnmae = \"b\"\n[[subs]]\nidd = 1\n"), &v)
	if err == nil || err.Error() != "line 2: unknown key nmae; did you mean name?\nline 4: unknown key subs[0].idd; did you mean id?" {
		t.Fatalf("unknown keys: %v", err)
	}
	if err := Decode([]byte("name = "), &v); err == nil {
		t.Fatal("a syntax error passed")
	}
}

// The same typo in two entries of an array of tables is named once per
// entry, each with its index and line (it was "unknown key(s):
// subs.idd, subs.idd": twice, no index, no line, no suggestion); a key
// under an unknown table is not named again; a key of the top level
// written below a table header is told where it goes.
func TestUnknownKeysOncePerPlace(t *testing.T) {
	const text = `name = "a"   # the name

[[subs]]
id = 1
idd = 2
[subs.inner]
limt = 3

[[subs]]
id = 2
note = """
idd = 9
"""
idd = 4
extra = { a = 1, b = [1,
  2] }
[colors]
red = 1
[[subs]]
name = "x"
`
	var v doc
	err := Decode([]byte(text), &v)
	var e *UnknownKeysError
	if !errors.As(err, &e) {
		t.Fatalf("want an *UnknownKeysError, got %v", err)
	}
	want := []UnknownKey{
		{Key: "subs[0].idd", Line: 5, Hint: "did you mean id?"},
		{Key: "subs[0].inner.limt", Line: 7, Hint: "did you mean limit?"},
		{Key: "subs[1].note", Line: 11},
		{Key: "subs[1].idd", Line: 14, Hint: "did you mean id?"},
		{Key: "subs[1].extra", Line: 15},
		{Key: "colors", Line: 17},
		{Key: "subs[2].name", Line: 20, Hint: "name is a top-level key: below a [table] header it belongs to that table; move it above the first table (line 3)"},
	}
	if !reflect.DeepEqual(e.Keys, want) {
		t.Errorf("unknown keys:\n got %+v\nwant %+v", e.Keys, want)
	}
	if strings.Count(err.Error(), "subs[0].idd") != 1 || strings.Contains(err.Error(), "subs.idd") {
		t.Errorf("error text: %s", err)
	}
}

func TestLines(t *testing.T) {
	const text = "name = 'a'\n\n[[subs]]\nid = 1\n[[subs]]\n\"id\" = 2\n[subs.inner]\nlimit = 5\n"
	var v doc
	l, err := DecodeLines([]byte(text), &v)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int{
		"name": 1, "subs[0]": 3, "subs[0].id": 4, "subs[1]": 5, "subs[1].id": 6, "subs[1].inner": 7, "subs[1].inner.limit": 8,
		"subs[0].inner.limit": 3, // not written: its entry's line
		"nothing":             0,
	} {
		if got := l.Line(key); got != want {
			t.Errorf("Line(%q) = %d, want %d", key, got, want)
		}
	}
}
