package rollout

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A broken flags document is told with where it is broken: a JSON syntax
// error's line and column, and for a bad value its JSON path and the line
// and column where the value starts.
func TestParseFlagsSaysWhere(t *testing.T) {
	t.Parallel()
	f := NewFlags()
	must(t, f.SetMode(PodScope("pod-a"), ModeMySQL))
	must(t, f.EngageKill(PodScope("pod-b"), KillRedis, Attribution{Actor: "ana", Reason: "test", At: time.Unix(1e9, 0)}))
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
			_, err := ParseFlags([]byte(tc.doc))
			var fe *FlagsError
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
	_, err = ParseFlags([]byte(cut))
	var fe *FlagsError
	if !errors.As(err, &fe) || fe.Field != "file" || fe.Line != strings.Count(strings.TrimRight(cut, " \n"), "\n")+1 || fe.Column == 0 {
		t.Errorf("a document cut short: %+v (%v)", fe, err)
	}

	// Several lines, characters counted as characters.
	_, err = ParseFlags([]byte("{\n  \"$comment\": \"é€\", \"flags\": x}"))
	if !errors.As(err, &fe) || fe.Line != 2 || fe.Column != 30 {
		t.Errorf("a syntax error after multi-byte characters: %+v", fe)
	}
}

// The path in a FlagsError's Field reads back into a document's path.
func TestFieldPath(t *testing.T) {
	t.Parallel()
	for field, want := range map[string]string{
		`flags["reservations.mode"].targeting.if[2]`: "/flags/reservations.mode/targeting/if/2",
		`$evaluators["pod:a.b[c]"]`:                  "/$evaluators/pod:a.b[c]",
		`flags["x"].metadata["shop:1.reason"]`:       "/flags/x/metadata/shop:1.reason",
		`version`:                                    "/version",
	} {
		got, ok := fieldPath(field)
		if !ok || strings.ReplaceAll(got, pathSep, "/") != want {
			t.Errorf("fieldPath(%s) = %q, %v; want %s", field, strings.ReplaceAll(got, pathSep, "/"), ok, want)
		}
	}
	for _, field := range []string{`flags[`, `flags["x`, `.a`, `a..b`} {
		if got, ok := fieldPath(field); ok {
			t.Errorf("fieldPath(%s) = %q; want not a path", field, got)
		}
	}
}

// An unknown variant in a running source's newest document is a rejected
// document: the source keeps answering from the last valid flags (the
// engaged kill switch included, never read as "off"), reports the
// rejection with where it is, and clears it once a valid document loads.
func TestFlagSourceRejectsUnknownVariantsWhileRunning(t *testing.T) {
	t.Parallel()
	valid := NewFlags()
	must(t, valid.SetMode(PodScope("pod-a"), ModeMySQL))
	must(t, valid.EngageKill(PodScope("pod-b"), KillRedis, Attribution{Actor: "ana", Reason: "pod-b slow"}))
	valid.Version = 2
	good, err := valid.Render()
	must(t, err)
	bump := func(doc string) string { return strings.ReplaceAll(doc, `"version": 2`, `"version": 3`) }

	for name, tc := range map[string]struct{ edit, want string }{
		"mysqll": {
			bump(strings.ReplaceAll(strings.Replace(string(good), `"mysql": "mysql"`, `"mysqll": "mysqll"`, 1), `{"$ref": "pod:pod-a"}, "mysql"`, `{"$ref": "pod:pod-a"}, "mysqll"`)),
			`flags["reservations.mode"].variants["mysqll"] (line `,
		},
		"kill switch redis_onyl": {
			bump(strings.Replace(strings.Replace(string(good), `"redis_only": "redis_only"`, `"redis_onyl": "redis_onyl"`, 1), `"defaultVariant": "off"`, `"defaultVariant": "redis_onyl"`, 1)),
			`flags["reservations.kill_switch"].variants["redis_onyl"] (line `,
		},
		// The variants are intact; a rule answers one they lack. flagd
		// takes the document, and would answer pod-b's shops with an
		// error instead of its engaged kill switch.
		"kill switch rule answers redis_onyl": {
			bump(strings.Replace(string(good), `{"$ref": "pod:pod-b"}, "redis"`, `{"$ref": "pod:pod-b"}, "redis_onyl"`, 1)),
			`flags["reservations.kill_switch"].targeting.if[1] (line `,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fx := setup(t, valid, "")
			src := fx.source(t)
			want := func() {
				t.Helper()
				if d := decide(t, src, "pod-a", 1); d != (Decision{Mode: ModeMySQL, Kill: KillOff, Version: 2}) {
					t.Errorf("pod-a after the rejected document: %+v, want the last valid flags (mysql at version 2)", d)
				}
				if d := decide(t, src, "pod-b", 1); d != (Decision{Mode: ModeRedis, Kill: KillRedis, Version: 2}) {
					t.Errorf("pod-b after the rejected document: %+v, want its kill switch engaged (version 2)", d)
				}
			}
			if _, err := src.Rejected(); err != nil {
				t.Fatalf("rejected at start: %v", err)
			}
			fx.replace(t, tc.edit)
			eventually(t, 2*time.Second, "the document to be rejected", func() bool { _, err := src.Rejected(); return err != nil })
			at, err := src.Rejected()
			if !strings.Contains(err.Error(), tc.want) || time.Since(at) > time.Minute || !src.Loaded() {
				t.Errorf("Rejected() = %v, %v (loaded %v); want an error containing %s", at, err, src.Loaded(), tc.want)
			}
			want()
			if fx.logs.count("flags file rejected; keeping the last valid flags") != 1 {
				t.Errorf("want one log line for the rejection:\n%s", fx.logs)
			}
			// Put back as it was: the version in force is the newest again.
			fx.replace(t, string(good))
			eventually(t, 2*time.Second, "the rejection to clear", func() bool { _, err := src.Rejected(); return err == nil })
			want()
			// A fix at a new version loads and keeps it clear.
			fx.replace(t, tc.edit)
			eventually(t, 2*time.Second, "the document to be rejected again", func() bool { _, err := src.Rejected(); return err != nil })
			next := valid.Clone()
			next.Version = 4
			must(t, fx.file.Write(next))
			eventually(t, 2*time.Second, "the fix to load", func() bool { return decide(t, src, "pod-a", 1).Version == 4 })
			if _, err := src.Rejected(); err != nil {
				t.Errorf("still rejected after a valid document loaded: %v", err)
			}
		})
	}
}
