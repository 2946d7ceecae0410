package flagdoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// Where a flags document is broken. An operator fixing a document in an
// incident needs the place, not just the problem: ParseFlags and the
// sources' checks give a JSON syntax error its line and column, and a bad
// value its JSON path (FlagsError.Field) with the line and column where
// the value starts.

// position returns the 1-based line and column (in characters) of the
// byte at off in data.
func position(data []byte, off int64) (line, column int) {
	off = max(0, min(off, int64(len(data))))
	before := data[:off]
	start := bytes.LastIndexByte(before, '\n') + 1
	return 1 + bytes.Count(before, []byte{'\n'}), 1 + utf8.RuneCount(before[start:])
}

// syntaxError describes a JSON decoding error of data as a FlagsError for
// the whole document ("file") at the offending byte: a *json.SyntaxError's
// (its Offset is just past that byte), or the end of the document for one
// cut short.
func syntaxError(data []byte, err error) *FlagsError {
	fe := &FlagsError{Field: "file", Problem: "not JSON: " + err.Error()}
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		fe.Line, fe.Column = position(data, se.Offset-1)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		fe.Problem = "not JSON: the document ends before its last value is complete (cut short?)"
		fe.Line, fe.Column = position(data, int64(len(bytes.TrimRight(data, " \t\r\n"))))
	}
	return fe
}

// trailing refuses anything but white space after the document dec
// decoded from data (a stray closing brace included, which dec.More does
// not see).
func trailing(data []byte, dec *json.Decoder) *FlagsError {
	off := dec.InputOffset()
	for off < int64(len(data)) && strings.IndexByte(" \t\r\n", data[off]) >= 0 {
		off++
	}
	if off == int64(len(data)) {
		return nil
	}
	fe := &FlagsError{Field: "file", Problem: "trailing data after the JSON document"}
	fe.Line, fe.Column = position(data, off)
	return fe
}

// locate sets Line and Column of every *FlagsError in err (joined errors
// included) whose Field names a value of data, to where that value
// starts. A field the document does not hold (one of the model's, like
// `pods["pod-b"].mode`) stays without a position. It returns err.
func locate(data []byte, err error) error {
	var offsets map[string]int64
	var visit func(error)
	visit = func(e error) {
		if fe, ok := e.(*FlagsError); ok {
			if fe.Line > 0 || fe.Field == "file" {
				return
			}
			if offsets == nil {
				offsets = valueOffsets(data)
			}
			// A top-level key is named as it is ("reservations.mode" put
			// at the top by a misplaced brace); any other field by its path.
			off, ok := offsets[pathSep+fe.Field]
			if path, isPath := fieldPath(fe.Field); !ok && isPath {
				off, ok = offsets[path]
			}
			if ok {
				fe.Line, fe.Column = position(data, off)
			}
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				visit(x)
			}
		}
	}
	if err != nil {
		visit(err)
	}
	return err
}

// pathSep separates the members of a path in valueOffsets' keys.
const pathSep = "\x00"

// valueOffsets maps the path of every value in data (object keys and array
// indexes, each after pathSep; "" is the whole document) to the offset of
// the value's first byte. A document broken part way maps what comes
// before the break.
func valueOffsets(data []byte) map[string]int64 {
	offsets := map[string]int64{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var walk func(path string) error
	walk = func(path string) error {
		start := dec.InputOffset()
		for start < int64(len(data)) && strings.IndexByte(" \t\r\n:,", data[start]) >= 0 {
			start++
		}
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		offsets[path] = start
		switch tok {
		case json.Delim('{'):
			for dec.More() {
				key, err := dec.Token()
				if err != nil {
					return err
				}
				name, _ := key.(string)
				if err := walk(path + pathSep + name); err != nil {
					return err
				}
			}
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if err := walk(path + pathSep + strconv.Itoa(i)); err != nil {
					return err
				}
			}
		default:
			return nil
		}
		_, err = dec.Token() // the closing delimiter
		return err
	}
	_ = walk("")
	return offsets
}

// fieldPath turns a FlagsError.Field written the way the parser writes it
// (`flags["reservations.mode"].targeting.if[2]`, `$evaluators["pod:a"]`)
// into a valueOffsets key.
func fieldPath(field string) (string, bool) {
	var b strings.Builder
	first := true
	for field != "" {
		switch {
		case strings.HasPrefix(field, `["`):
			q, err := strconv.QuotedPrefix(field[1:])
			if err != nil || !strings.HasPrefix(field[1+len(q):], "]") {
				return "", false
			}
			name, _ := strconv.Unquote(q)
			b.WriteString(pathSep + name)
			field = field[2+len(q):]
		case strings.HasPrefix(field, "["):
			i := strings.IndexByte(field, ']')
			if i < 0 {
				return "", false
			}
			b.WriteString(pathSep + field[1:i])
			field = field[i+1:]
		case strings.HasPrefix(field, ".") && !first:
			field = field[1:]
			if field == "" || strings.IndexByte(".[", field[0]) >= 0 {
				return "", false
			}
			fallthrough
		default:
			i := strings.IndexAny(field, ".[")
			if i < 0 {
				i = len(field)
			}
			if i == 0 {
				return "", false
			}
			b.WriteString(pathSep + field[:i])
			field = field[i:]
		}
		first = false
	}
	return b.String(), true
}

// checkVariants refuses a flags document that flagd would accept but whose
// reservoir flags could answer a value reservoir does not know (an
// "mysqll" in a hand edit): every variant of FlagMode and FlagKillSwitch
// must be one of reservoir's, its value equal to its name, and the
// defaultVariant and each variant the targeting's if-chain answers must
// be among the flag's variants. Read, such a document counts as rejected
// (the last valid flags stay in force, and the source reports it), never
// as "redis with the kill switch off". It also refuses what is not JSON,
// with the line and column. Each problem is a *FlagsError with its path
// and position, joined.
func checkVariants(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return syntaxError(data, err)
	}
	if err := trailing(data, dec); err != nil {
		return err
	}
	root, _ := doc.(map[string]any)
	flags, _ := root["flags"].(map[string]any)
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FlagsError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	for _, key := range []string{FlagKillSwitch, FlagMode} {
		fl, ok := flags[key].(map[string]any)
		if !ok {
			continue // absent (the code default), or not an object (flagd refuses it)
		}
		known := names(authority.Kills)
		if key == FlagMode {
			known = names(authority.Modes)
		}
		field := fmt.Sprintf("flags[%q]", key)
		variants, _ := fl["variants"].(map[string]any)
		for _, name := range sortedKeys(variants) {
			at := fmt.Sprintf("%s.variants[%q]", field, name)
			switch {
			case !slices.Contains(known, name):
				bad(at, "unknown variant %q (want %s)", name, strings.Join(known, ", "))
			case variants[name] != name:
				bad(at, "value %v must equal the variant's name %q (reservoir reads the value)", jsonText(variants[name]), name)
			}
		}
		if def, ok := fl["defaultVariant"].(string); ok {
			if _, ok := variants[def]; !ok {
				bad(field+".defaultVariant", "%q is not one of the flag's variants", def)
			}
		}
		targeting, _ := fl["targeting"].(map[string]any)
		rules, _ := targeting["if"].([]any)
		for i, r := range rules {
			answer := i%2 == 1 || i == len(rules)-1 && i%2 == 0 && i > 0
			if s, ok := r.(string); ok && answer {
				if _, ok := variants[s]; !ok {
					bad(fmt.Sprintf("%s.targeting.if[%d]", field, i), "%q is not one of the flag's variants", s)
				}
			}
		}
	}
	return locate(data, errors.Join(errs...))
}

// jsonText shows a decoded JSON value as JSON.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
