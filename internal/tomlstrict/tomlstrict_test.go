package tomlstrict

import (
	"strings"
	"testing"
)

func TestDecodeRefusesUnknownKeys(t *testing.T) {
	var v struct {
		Name string `toml:"name"`
		Subs []struct {
			ID int `toml:"id"`
		} `toml:"subs"`
	}
	if err := Decode([]byte("name = \"a\"\n[[subs]]\nid = 1\n"), &v); err != nil || v.Name != "a" || len(v.Subs) != 1 {
		t.Fatalf("a valid document: %v %+v", err, v)
	}
	err := Decode([]byte("name = \"a\"\nnmae = \"b\"\n[[subs]]\nidd = 1\n"), &v)
	if err == nil || !strings.Contains(err.Error(), "unknown key(s): nmae, subs.idd") {
		t.Fatalf("unknown keys: %v", err)
	}
	if err := Decode([]byte("name = "), &v); err == nil {
		t.Fatal("a syntax error passed")
	}
}
