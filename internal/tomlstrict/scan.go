package tomlstrict

import (
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// keyLine is a key as written in a document: a table header or a key of
// an assignment, its full name (toml.Key's String) and its line.
type keyLine struct {
	key    string
	line   int
	header bool
}

// scan lists the table headers and assigned keys of doc, a document the
// TOML library has parsed already, in order, each with its line. The
// library keeps no position of a key it decoded, so this follows what is
// needed of the grammar: headers, dotted and quoted keys, comments, and
// values that span lines (multi-line strings, arrays and inline tables),
// whose lines hold no key of the document's tables. It never fails: what
// it does not recognise, it skips.
func scan(doc string) []keyLine {
	var (
		out   []keyLine
		table []string // the current table's key
		ml    string   // the delimiter of the multi-line string open, or ""
		depth int      // arrays and inline tables open
	)
	for n, line := range strings.Split(doc, "\n") {
		rest := line
		if ml != "" {
			i := closing(rest, ml)
			if i < 0 {
				continue
			}
			rest, ml = rest[i+len(ml):], ""
		} else if depth == 0 {
			s := strings.TrimLeft(rest, " \t")
			switch {
			case s == "" || s[0] == '#':
				continue
			case strings.HasPrefix(s, "[[") || s[0] == '[':
				open, end := "[", "]"
				if strings.HasPrefix(s, "[[") {
					open, end = "[[", "]]"
				}
				k, after, ok := parseKey(s[len(open):])
				if !ok || !strings.HasPrefix(strings.TrimLeft(after, " \t"), end) {
					continue
				}
				table = k
				out = append(out, keyLine{key: toml.Key(k).String(), line: n + 1, header: true})
				continue
			default:
				k, after, ok := parseKey(s)
				after = strings.TrimLeft(after, " \t")
				if !ok || !strings.HasPrefix(after, "=") {
					continue
				}
				full := append(append([]string{}, table...), k...)
				out = append(out, keyLine{key: toml.Key(full).String(), line: n + 1})
				rest = after[1:]
			}
		}
		ml, depth = value(rest, depth)
	}
	return out
}

// parseKey reads a key (bare, quoted or dotted) at the start of s and
// returns its parts and what follows it.
func parseKey(s string) (parts []string, rest string, ok bool) {
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return nil, "", false
		}
		var part string
		switch s[0] {
		case '"':
			end := 1
			for end < len(s) && s[end] != '"' {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(s) {
				return nil, "", false
			}
			u, err := strconv.Unquote(s[:end+1])
			if err != nil {
				return nil, "", false
			}
			part, s = u, s[end+1:]
		case '\'':
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return nil, "", false
			}
			part, s = s[1:end+1], s[end+2:]
		default:
			end := 0
			for end < len(s) && bare(s[end]) {
				end++
			}
			if end == 0 {
				return nil, "", false
			}
			part, s = s[:end], s[end:]
		}
		parts = append(parts, part)
		t := strings.TrimLeft(s, " \t")
		if !strings.HasPrefix(t, ".") {
			return parts, s, true
		}
		s = t[1:]
	}
}

func bare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// value reads the rest of a line that is (part of) a value, from depth
// arrays and inline tables open, and returns the multi-line string left
// open at its end ("" for none) and how many arrays and inline tables are.
func value(s string, depth int) (ml string, _ int) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '#':
			return "", depth
		case '[', '{':
			depth++
		case ']', '}':
			depth = max(depth-1, 0)
		case '"', '\'':
			delim := string(c)
			if strings.HasPrefix(s[i:], strings.Repeat(delim, 3)) {
				delim = strings.Repeat(delim, 3)
			}
			j := closing(s[i+len(delim):], delim)
			if j < 0 {
				if len(delim) == 3 {
					return delim, depth
				}
				return "", depth // an unterminated string: the library refused it already
			}
			i += len(delim) + j + len(delim) - 1
		}
	}
	return "", depth
}

// closing returns where delim closes a string in s (-1: not in s),
// skipping escaped characters in a basic string.
func closing(s, delim string) int {
	for i := 0; i < len(s); i++ {
		if delim[0] == '"' && s[i] == '\\' {
			i++
			continue
		}
		if strings.HasPrefix(s[i:], delim) {
			// A multi-line string may end with up to two more quotes.
			for len(delim) == 3 && strings.HasPrefix(s[i+1:], delim) {
				i++
			}
			return i
		}
	}
	return -1
}
