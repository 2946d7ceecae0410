package flagdoc_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/rollout/flagdoc"

	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// A broken flags document is told with where it is broken: a JSON syntax
// error's line and column, and for a bad value its JSON path and the line
// and column where the value starts.
func TestParseFlagsSaysWhere(t *testing.T) {
	t.Parallel()
	f := flagdoc.NewFlags()
	must(t, f.SetMode(flagdoc.PodScope("pod-a"), authority.ModeMySQL))
	must(t, f.EngageKill(flagdoc.PodScope("pod-b"), authority.KillRedis, flagdoc.Attribution{Actor: "ana", Reason: "test", At: time.Unix(1e9, 0)}))
	f.Version = 7
	good, err := f.Render()
	must(t, err)
	doc := string(good)
	// lineOf is the 1-based line of the first occurrence of s in doc, and
	// the column where it starts.
	lineOf := func(doc, s string) (int, int) {
		i := strings.Index(doc, s)
		if i < 0 {
			t.Fatalf("%q not in the document", s)
		}
		line := 1 + strings.Count(doc[:i], "\n")
		return line, i - strings.LastIndex(doc[:i], "\n")
	}

	for name, tc := range map[string]struct {
		doc       string
		field     string
		at        string // where the problem is: the text that starts there
		atOffset  int    // added to at's column
		problem   string
		wantWhere bool
	}{
		"a missing comma": {
			doc:   strings.Replace(doc, `"state": "ENABLED",`, `"state": "ENABLED"`, 1),
			field: "file", at: `"variants"`, problem: "invalid character '\"' after object key:value pair", wantWhere: true,
		},
		"a stray brace at the end": {
			doc:   doc + "}\n",
			field: "file", at: "}\n", problem: "trailing data after the JSON document", wantWhere: true,
		},
		"a flag closed early": {
			doc:   strings.Replace(doc, `"defaultVariant": "off",`, `"defaultVariant": "off"},`, 1),
			field: "file", at: "}\n", problem: "trailing data after the JSON document", wantWhere: true,
		},
		"an unknown mode variant": {
			doc:   strings.Replace(doc, `"mysql": "mysql"`, `"mysqll": "mysqll"`, 1),
			field: `flags["reservations.mode"].variants["mysqll"]`, at: `"mysqll"`, atOffset: len(`"mysqll": `),
			problem: "unknown variant", wantWhere: true,
		},
		"an unknown kill switch rule answer": {
			doc:   strings.Replace(doc, `{"$ref": "pod:pod-b"}, "redis"`, `{"$ref": "pod:pod-b"}, "redis_onyl"`, 1),
			field: `flags["reservations.kill_switch"].targeting.if[1]`, at: `"redis_onyl"`,
			problem: "is not one of the flag's variants", wantWhere: true,
		},
		"a version as a string": {
			doc:   strings.Replace(doc, `"version": 7`, `"version": "7"`, 1),
			field: `flags["reservations.kill_switch"].metadata.version`, at: `"7"`,
			problem: "want a whole number", wantWhere: true,
		},
		"an unknown top-level key": {
			doc:   strings.Replace(doc, `"flags": {`, `"flagz": 1, "flags": {`, 1),
			field: "flagz", at: `1, "flags"`, problem: "unknown top-level key", wantWhere: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := flagdoc.ParseFlags([]byte(tc.doc))
			var fe *flagdoc.FlagsError
			if !errors.As(err, &fe) {
				t.Fatalf("ParseFlags: %v, want a *FlagsError", err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Problem, tc.problem) {
				t.Errorf("got field %s problem %q, want field %s problem containing %q", fe.Field, fe.Problem, tc.field, tc.problem)
			}
			line, col := lineOf(tc.doc, tc.at)
			if tc.at == "}\n" {
				// The last brace: the one with nothing left to close.
				i := strings.LastIndex(tc.doc, "}")
				line, col = 1+strings.Count(tc.doc[:i], "\n"), i-strings.LastIndex(tc.doc[:i], "\n")
			}
			col += tc.atOffset
			if fe.Line != line || fe.Column != col {
				t.Errorf("at line %d, column %d; want line %d, column %d (%s)", fe.Line, fe.Column, line, col, err)
			}
			if !strings.Contains(err.Error(), "line ") {
				t.Errorf("the message does not say where: %v", err)
			}
		})
	}

	// Cut short: the end of what is there.
	cut := doc[:strings.Index(doc, `"reservations.mode"`)]
	_, err = flagdoc.ParseFlags([]byte(cut))
	var fe *flagdoc.FlagsError
	if !errors.As(err, &fe) || fe.Field != "file" || fe.Line != strings.Count(strings.TrimRight(cut, " \n"), "\n")+1 || fe.Column == 0 {
		t.Errorf("a document cut short: %+v (%v)", fe, err)
	}

	// Several lines, characters counted as characters.
	_, err = flagdoc.ParseFlags([]byte("{\n  \"$comment\": \"é€\", \"flags\": x}"))
	if !errors.As(err, &fe) || fe.Line != 2 || fe.Column != 30 {
		t.Errorf("a syntax error after multi-byte characters: %+v", fe)
	}
}
