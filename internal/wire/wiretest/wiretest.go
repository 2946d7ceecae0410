// Package wiretest checks JSON documents against package wire's
// conventions, for the tests of what writes them: the server's answers and
// the CLI's --json outputs. Package wire's own tests check its types; this
// checks what actually went out, so a body written from anything else (a
// domain type, a map) is caught too. It is imported by tests only.
package wiretest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// Faults lists what in the JSON document doc breaks the wire's
// conventions, each with its path (".plan.next.Name"): a key with a
// capital letter (a Go field name that reached the wire: "Name",
// "MinObservations") and a zero time ("0001-01-01T00:00:00Z": a time not
// known written as year 1). A document that is not JSON is one fault. A
// key is not required to be snake_case: a map's keys are data (a pod named
// "pod-a" keys /admin/series).
func Faults(doc []byte) []string {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return []string{"invalid JSON: " + err.Error()}
	}
	var out []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if strings.ContainsFunc(k, unicode.IsUpper) {
					out = append(out, path+"."+k+": a key with a capital letter")
				}
				walk(path+"."+k, e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		case string:
			if strings.HasPrefix(v, "0001-01-01") {
				out = append(out, path+": a zero time ("+v+")")
			}
		}
	}
	walk("", v)
	slices.Sort(out)
	return out
}
