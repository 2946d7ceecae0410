package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
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

	"github.com/BurntSushi/toml"
	"gopkg.in/yaml.v3"

	"github.com/seed31b0e981/reservoir/internal/cli"
	"github.com/seed31b0e981/reservoir/internal/server"
)

// The commands of the documentation run as written. A reader pastes a
// fenced shell block of README.md or docs/ into a terminal in the
// checkout, against the example topology; these tests read every such
// block the way a shell would and hold each command to the code:
//
//   - `bin/reservoir ...`: the command, its action, every flag and
//     positional argument exist (reservoir's own -h says which), a flag
//     that takes a value has one that is not a placeholder (FILE, NAME),
//     a command that needs a topology gets --topology (or
//     $RESERVOIR_TOPOLOGY set before it on the page), and the binary is
//     spelt as `make build` leaves it in the checkout, bin/reservoir;
//   - `curl ...`: the URL's port is a listener (serve's --addr and
//     --admin-addr defaults, the demo's --addr, a serve command of the
//     page, or a `kubectl port-forward` of a Service in
//     deploy/kubernetes/base/service.yaml), that listener has a route for
//     the path with the method (the routes are read from
//     internal/server/api.go, and matched by net/http's own ServeMux),
//     an admin API call carries the admin bearer token, a checkout call
//     a client token (and, with a body, Content-Type: application/json),
//     and a JSON body parses;
//   - a pod a command names (`pod:NAME`, --pod NAME) is a pod of an
//     example topology (deploy/topology.example.toml, or the one in
//     deploy/kubernetes/base/configmap.yaml);
//   - a path into the repository (deploy/..., scripts/...) exists, and
//     `make TARGET` is a target of the Makefile.
//
// Blocks labelled sh, bash, shell or console hold commands. An unlabelled
// block may show a synopsis (its flags must exist), a command's output, or
// a transcript ("$ bin/reservoir ..."); a command to paste in it is
// refused: label the block sh. A transcript whose output is a usage error
// ("Run '... -h' for usage.") shows a mistake on purpose and is not held
// to the rest.
//
// TestDocCommandsAgainstAServedExample (commands_served_test.go) then
// sends every curl to a real replica, on the listener its port names.

// docBlock is one fenced block of a Markdown page.
type docBlock struct {
	file  string // relative to the repository, slash separated
	line  int    // the line of the opening fence, from 1
	lang  string // the fence's info string: "sh", "" (unlabelled), ...
	lines []string
}

var fenceOpen = regexp.MustCompile("^[ \t]*(`{3,}|~{3,})[ \t]*([^ \t`]*)")

// fencedBlocks returns the fenced blocks of a Markdown page.
func fencedBlocks(rel, doc string) []docBlock {
	var out []docBlock
	var cur *docBlock
	var fence string
	for i, l := range strings.Split(doc, "\n") {
		if cur == nil {
			if m := fenceOpen.FindStringSubmatch(l); m != nil {
				cur, fence = &docBlock{file: rel, line: i + 1, lang: strings.ToLower(m[2])}, m[1]
			}
			continue
		}
		if t := strings.TrimSpace(l); strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
			out = append(out, *cur)
			cur = nil
			continue
		}
		cur.lines = append(cur.lines, l)
	}
	return out
}

// shellLabels are the info strings of a block of commands.
var shellLabels = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true, "zsh": true}

// docLine is one logical line of a block (continuation lines joined).
type docLine struct {
	line int // of its first physical line, in the page
	text string
}

// logicalLines joins the lines of b that end with a backslash to the next.
func logicalLines(b docBlock) []docLine {
	var out []docLine
	var cur strings.Builder
	start := 0
	for i, l := range b.lines {
		if cur.Len() == 0 {
			start = b.line + 1 + i
		}
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " \t"), `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		out = append(out, docLine{line: start, text: cur.String()})
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, docLine{line: start, text: cur.String()})
	}
	return out
}

// shellCommands splits a line into its simple commands (split at ;, &&,
// ||, | and &), each as its words with the quotes removed, as sh would;
// a word starting with # begins a comment. $(...) stays one word, as
// written.
func shellCommands(line string) [][]string {
	var (
		cmds  [][]string
		words []string
		word  strings.Builder
		inW   bool
		quote rune
		depth int
	)
	endWord := func() {
		if inW {
			words = append(words, word.String())
			word.Reset()
			inW = false
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
			words = nil
		}
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case quote == '"':
			switch {
			case r == '"' && depth == 0:
				quote = 0
			case r == '\\' && i+1 < len(rs) && strings.ContainsRune(`"\$`+"`", rs[i+1]):
				i++
				word.WriteRune(rs[i])
			default:
				if r == '(' && i > 0 && rs[i-1] == '$' {
					depth++
				} else if r == ')' && depth > 0 {
					depth--
				}
				word.WriteRune(r)
			}
		case depth > 0:
			if r == '(' {
				depth++
			} else if r == ')' {
				depth--
			}
			word.WriteRune(r)
		case r == '$' && i+1 < len(rs) && rs[i+1] == '(':
			inW = true
			depth++
			word.WriteString("$(")
			i++
		case r == '\'' || r == '"':
			inW, quote = true, r
		case r == '\\' && i+1 < len(rs):
			i++
			inW = true
			word.WriteRune(rs[i])
		case r == ' ' || r == '\t':
			endWord()
		case r == '#' && !inW:
			endCmd()
			return cmds
		case r == ';' || r == '&' || r == '|':
			if i+1 < len(rs) && rs[i+1] == r {
				i++
			}
			endCmd()
		default:
			inW = true
			word.WriteRune(r)
		}
	}
	endCmd()
	return cmds
}

// docRoute is one route of the server, as internal/server/api.go
// registers it.
type docRoute struct {
	pattern  string // "POST /admin/killswitch"
	listener string // "checkout" or "admin"
	token    bool   // an admin bearer token is required (server.AdminRole)
	body     bool   // a checkout call with a JSON body
}

// serverRoutes reads the routes from internal/server/api.go: the calls
// checkout("METHOD /path", op, withBody, h) and ops("METHOD /path",
// limited, h) in Server.routes; an ops route needs a token unless the
// server's role table (server.AdminRole) says it is public.
func serverRoutes(t testing.TB, root string) []docRoute {
	t.Helper()
	path := filepath.Join(root, "internal", "server", "api.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []docRoute
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 3 {
			return true
		}
		fn, ok := call.Fun.(*ast.Ident)
		if !ok || (fn.Name != "checkout" && fn.Name != "ops") {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		pattern, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Fatal(err)
		}
		r := docRoute{pattern: pattern, listener: "admin"}
		if fn.Name == "checkout" {
			r.listener = "checkout"
			if b, ok := call.Args[2].(*ast.Ident); ok && b.Name == "true" {
				r.body = true
			}
		} else {
			role, ok := server.AdminRole(pattern)
			if !ok {
				t.Fatalf("%s: admin listener route %s has no role in the server's table", path, pattern)
			}
			r.token = role != ""
		}
		out = append(out, r)
		return true
	})
	return out
}

// docListener is what a port of the documentation serves.
type docListener struct {
	name string // "checkout", "admin" or "both"
	how  string // where the port comes from, for a message
}

// docEnv is what the checks hold the commands to.
type docEnv struct {
	help      func(args ...string) (string, bool) // reservoir's help for args, and whether it exits 0
	routes    []docRoute
	listeners map[string]docListener            // port -> listener, by default
	services  map[string]map[string]docListener // Kubernetes Service -> port -> listener
	pods      map[string]bool                   // the example topologies' pods
	targets   map[string]bool                   // the Makefile's targets
	exists    func(rel string) bool             // a path of the repository exists
	topDirs   map[string]bool                   // the repository's top-level directories
}

// cliHelp returns reservoir's help for args (args plus -h, run in
// process, which prints the help and runs nothing), cached.
func cliHelp() func(args ...string) (string, bool) {
	cache := map[string]struct {
		text string
		ok   bool
	}{}
	return func(args ...string) (string, bool) {
		key := strings.Join(args, "\x00")
		if c, ok := cache[key]; ok {
			return c.text, c.ok
		}
		var out, errOut bytes.Buffer
		code := cli.Main(context.Background(), append(slices.Clone(args), "-h"), &out, &errOut)
		text := out.String() + errOut.String()
		cache[key] = struct {
			text string
			ok   bool
		}{text, code == 0}
		return text, code == 0
	}
}

var (
	helpFlag    = regexp.MustCompile(`(?m)^  -{1,2}([A-Za-z0-9][A-Za-z0-9-]*)(?: (\S+))?[ \t]*$`)
	helpAction  = regexp.MustCompile(`(?m)^  ([a-z][a-z-]*) `)
	helpDefault = regexp.MustCompile(`\(default ([^()\s]+)\)\s*$`)
)

// helpFlags returns the flags a help text lists, each with whether it
// takes a value, and the default its description gives.
func helpFlags(help string) (takesValue map[string]bool, defaults map[string]string) {
	takesValue, defaults = map[string]bool{}, map[string]string{}
	lines := strings.Split(help, "\n")
	for i, l := range lines {
		m := helpFlag.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		takesValue[m[1]] = m[2] != ""
		if i+1 < len(lines) {
			if d := helpDefault.FindStringSubmatch(lines[i+1]); d != nil {
				defaults[m[1]] = d[1]
			}
		}
	}
	return takesValue, defaults
}

// helpActions returns the actions a help text lists in its "actions:"
// section (reservoir rollout -h).
func helpActions(help string) []string {
	_, section, ok := strings.Cut(help, "\nactions:\n")
	if !ok {
		return nil
	}
	section, _, _ = strings.Cut(section, "\n\n")
	var out []string
	for _, m := range helpAction.FindAllStringSubmatch(section, -1) {
		out = append(out, m[1])
	}
	return out
}

// usageWords returns the words of a help text's usage lines ("usage:
// reservoir migrate up|status ..." and the lines after it that start with
// "reservoir"), split at the synopsis' punctuation.
func usageWords(help string) map[string]bool {
	words := map[string]bool{}
	for _, l := range strings.Split(help, "\n") {
		l = strings.TrimSpace(l)
		rest, ok := strings.CutPrefix(l, "usage:")
		if !ok && !strings.HasPrefix(l, "reservoir ") {
			continue
		}
		for _, w := range strings.FieldsFunc(rest+" "+l, func(r rune) bool { return strings.ContainsRune(" \t[]()|,", r) }) {
			words[w] = true
		}
	}
	return words
}

// listenPort returns the port of a listen address ("127.0.0.1:8080", ":8080").
func listenPort(addr string) string {
	if _, p, err := net.SplitHostPort(addr); err == nil {
		return p
	}
	return ""
}

// newDocEnv reads the checks' references from the repository at root.
func newDocEnv(t testing.TB, root string) *docEnv {
	t.Helper()
	env := &docEnv{help: cliHelp(), routes: serverRoutes(t, root), listeners: map[string]docListener{},
		services: map[string]map[string]docListener{}, pods: map[string]bool{}, targets: map[string]bool{}, topDirs: map[string]bool{}}
	// The listeners: serve's defaults, and the demo's one listener.
	serveHelp, ok := env.help("serve")
	if !ok {
		t.Fatalf("reservoir serve -h failed: %s", serveHelp)
	}
	_, def := helpFlags(serveHelp)
	demoHelp, _ := env.help("demo")
	_, demoDef := helpFlags(demoHelp)
	for _, l := range []struct{ addr, name, how string }{
		{def["addr"], "checkout", "serve's --addr"},
		{def["admin-addr"], "admin", "serve's --admin-addr"},
		{demoDef["addr"], "both", "the demo's --addr"},
	} {
		p := listenPort(l.addr)
		if p == "" {
			t.Fatalf("no default port for %s in reservoir's help (%q)", l.how, l.addr)
		}
		env.listeners[p] = docListener{l.name, l.how + " " + l.addr}
	}
	// The Kubernetes Services, by the container port each targets.
	b, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes", "base", "service.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var svc struct {
			Metadata struct{ Name string } `yaml:"metadata"`
			Spec     struct {
				Ports []struct {
					Port       int    `yaml:"port"`
					TargetPort string `yaml:"targetPort"`
				} `yaml:"ports"`
			} `yaml:"spec"`
		}
		if err := dec.Decode(&svc); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		for _, p := range svc.Spec.Ports {
			if p.TargetPort == "checkout" || p.TargetPort == "admin" {
				if env.services[svc.Metadata.Name] == nil {
					env.services[svc.Metadata.Name] = map[string]docListener{}
				}
				env.services[svc.Metadata.Name][strconv.Itoa(p.Port)] = docListener{p.TargetPort,
					fmt.Sprintf("Service %s port %d (the %s listener)", svc.Metadata.Name, p.Port, p.TargetPort)}
			}
		}
	}
	// The example topologies' pods.
	type pods struct{ Pods []struct{ Name string } }
	var example pods
	if _, err := toml.DecodeFile(filepath.Join(root, "deploy", "topology.example.toml"), &example); err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile(filepath.Join(root, "deploy", "kubernetes", "base", "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct{ Data map[string]string }
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	var kube pods
	for _, v := range cm.Data {
		if _, err := toml.Decode(v, &kube); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range append(example.Pods, kube.Pods...) {
		env.pods[p.Name] = true
	}
	// The Makefile's targets.
	b, err = os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^([A-Za-z0-9_.-]+)\s*:`).FindAllStringSubmatch(string(b), -1) {
		env.targets[m[1]] = true
	}
	// The repository's paths.
	env.exists = func(rel string) bool {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
		return err == nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && e.Name() != "bin" && e.Name() != ".git" { // bin: what make build writes
			env.topDirs[e.Name()] = true
		}
	}
	return env
}

// docPage is what the checks learn of a page as they read it.
type docPage struct {
	rel       string
	set       map[string]bool        // variables set (export, read, NAME=value) so far
	listeners map[string]docListener // ports of serve or demo commands on the page
	problems  []string
	reservoir int       // reservoir commands checked
	curls     int       // curl commands checked
	calls     []docCall // the curl commands to a known listener, to send to a served example
}

// docCall is an HTTP call a page makes with curl.
type docCall struct {
	where    string // page:line
	listener string // "checkout", "admin" or "both"
	method   string
	target   string // path and query, as written ($VARs unexpanded)
	headers  []string
	body     string
	hasBody  bool
}

func (p *docPage) errorf(line int, format string, a ...any) {
	p.problems = append(p.problems, fmt.Sprintf("%s:%d: ", p.rel, line)+fmt.Sprintf(format, a...))
}

// reservoirBinaries are the spellings of the binary a command may use;
// only the first is what the checkout has after make build.
var reservoirBinaries = []string{"bin/reservoir", "reservoir", "./bin/reservoir", "/reservoir", "./reservoir"}

var (
	placeholder = regexp.MustCompile(`^([A-Z][A-Z0-9_]*|<[^>]*>|\.\.\.|…)$`)
	podRef      = regexp.MustCompile(`\bpod:([A-Za-z0-9_.-]+)`)
	varName     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	usageError  = regexp.MustCompile(`Run '[^']*-h' for usage\.`)
	varRef      = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)
	actionWord  = regexp.MustCompile(`^[a-z][a-z-]*$`)
	synWord     = regexp.MustCompile(`(?:^|[\s\[\]()|,])([a-z][a-z-]*)`)
	synFlag     = regexp.MustCompile(`(?:^|[\s\[(|])--?([a-z][a-z0-9-]*)`)
)

// commandProblems checks the commands of one page, rel with content doc.
func commandProblems(rel, doc string, env *docEnv) *docPage {
	page := &docPage{rel: rel, set: map[string]bool{}, listeners: map[string]docListener{}}
	for _, b := range fencedBlocks(rel, doc) {
		if !shellLabels[b.lang] && b.lang != "" {
			continue
		}
		lines := logicalLines(b)
		// A block's port-forwards apply to its every curl.
		forwards := map[string]docListener{}
		for _, l := range lines {
			for _, words := range shellCommands(strings.TrimPrefix(strings.TrimSpace(l.text), "$ ")) {
				if len(words) >= 4 && words[0] == "kubectl" && words[1] == "port-forward" {
					svc, _ := strings.CutPrefix(words[2], "svc/")
					svc, _ = strings.CutPrefix(svc, "service/")
					local, remote, ok := strings.Cut(words[3], ":")
					if !ok {
						remote = local
					}
					if ls, ok := env.services[svc][remote]; ok {
						forwards[local] = ls
					} else {
						page.errorf(l.line, "kubectl port-forward %s %s: deploy/kubernetes/base/service.yaml has no Service %s with port %s", words[2], words[3], svc, remote)
					}
				}
			}
		}
		for i, l := range lines {
			text := strings.TrimSpace(l.text)
			transcript := false
			if s, ok := strings.CutPrefix(text, "$ "); ok {
				text, transcript = s, true
			}
			if text == "" || strings.HasPrefix(text, "#") {
				continue
			}
			cmds := shellCommands(text)
			if b.lang == "console" && !transcript {
				continue // output
			}
			if b.lang == "" {
				// Unlabelled: a synopsis, output, or a transcript.
				first := strings.Fields(text)
				if len(first) == 0 || !slices.Contains(reservoirBinaries, first[0]) && first[0] != "curl" {
					continue
				}
				if len(first) > 1 && strings.HasSuffix(first[1], ":") || len(first) > 2 && strings.HasSuffix(first[2], ":") {
					continue // output: "reservoir rollout advance: refused: ..."
				}
				if strings.ContainsAny(text, "[]|(") || strings.Contains(text, "...") {
					if first[0] != "curl" {
						page.checkSynopsis(l.line, first[1:], env)
					}
					continue
				}
				if !transcript {
					page.errorf(l.line, "%q is a command to paste in an unlabelled block: label the block sh (```sh)", strings.TrimSpace(l.text))
				}
			}
			if transcript && mistakeOnPurpose(lines[i+1:]) {
				continue
			}
			for _, words := range cmds {
				page.checkCommand(l.line, words, forwards, env)
			}
		}
	}
	return page
}

// mistakeOnPurpose reports whether a transcript's output (the lines
// after it, up to the next command) is a usage error: the page shows a
// mistake and what reservoir says to it.
func mistakeOnPurpose(after []docLine) bool {
	for _, l := range after {
		if strings.HasPrefix(strings.TrimSpace(l.text), "$ ") {
			break
		}
		if usageError.MatchString(l.text) {
			return true
		}
	}
	return false
}

// checkCommand checks one simple command of a block.
func (p *docPage) checkCommand(line int, words []string, forwards map[string]docListener, env *docEnv) {
	// Assignments before the command, and commands that set variables.
	for len(words) > 0 {
		name, _, ok := strings.Cut(words[0], "=")
		if !ok || !varName.MatchString(name) {
			break
		}
		p.set[name] = true
		words = words[1:]
	}
	if len(words) == 0 {
		return
	}
	switch words[0] {
	case "export", "read":
		for _, w := range words[1:] {
			if name, _, _ := strings.Cut(w, "="); varName.MatchString(name) {
				p.set[name] = true
			}
		}
		return
	case "sudo", "env":
		p.checkCommand(line, words[1:], forwards, env)
		return
	}
	p.checkPaths(line, words, env)
	for _, w := range words {
		for _, m := range varRef.FindAllStringSubmatch(w, -1) {
			if !p.set[m[1]] && !strings.HasPrefix(m[1], "RESERVOIR_") && !shellVars[m[1]] {
				p.errorf(line, "%s: $%s is set nowhere before it on the page (reservoir's own variables, $RESERVOIR_..., are the reader's)", shellJoin(words), m[1])
			}
		}
	}
	switch {
	case slices.Contains(reservoirBinaries, words[0]):
		p.checkReservoir(line, words, env)
	case words[0] == "go" && len(words) > 2 && words[1] == "run" && strings.TrimPrefix(words[2], "./") == "cmd/reservoir":
		p.errorf(line, "%s: write bin/reservoir (make build) instead of go run", shellJoin(words))
	case words[0] == "curl":
		p.checkCurl(line, words, forwards, env)
	case words[0] == "make":
		for _, w := range words[1:] {
			if !strings.HasPrefix(w, "-") && !strings.Contains(w, "=") && !env.targets[w] {
				p.errorf(line, "make %s: the Makefile has no target %q", w, w)
			}
		}
	}
	for _, w := range words {
		for _, m := range podRef.FindAllStringSubmatch(w, -1) {
			if !env.pods[m[1]] {
				p.errorf(line, "%s names pod %q, which no example topology has (pods: %s)", shellJoin(words), m[1], podList(env))
			}
		}
	}
}

// shellVars are the variables a shell or a login sets.
var shellVars = map[string]bool{"HOME": true, "USER": true, "PWD": true, "PATH": true, "TMPDIR": true, "SHELL": true}

// shellJoin writes words back as a command, quoting those that need it.
func shellJoin(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		switch {
		case w != "" && !strings.ContainsAny(w, " \t\"'&;|<>{}*?!#"):
			out[i] = w
		case !strings.ContainsAny(w, "\"\\`"):
			out[i] = `"` + w + `"` // as the page would write it: $VAR expanded
		default:
			out[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

func podList(env *docEnv) string {
	var names []string
	for n := range env.pods {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// checkPaths checks that the words naming a path of the repository
// (deploy/..., ./scripts/...) name one that exists.
func (p *docPage) checkPaths(line int, words []string, env *docEnv) {
	for i, w := range words[1:] {
		if words[0] == "kubectl" && i > 0 && !strings.HasPrefix(w, "-") && !strings.HasPrefix(words[i], "-") {
			// kubectl's positional words are TYPE/NAME (deploy/reservoir),
			// not paths: only a flag's value (-f FILE, -k DIR) is one.
			continue
		}
		if strings.HasPrefix(w, "-") {
			_, v, ok := strings.Cut(w, "=")
			if !ok {
				continue
			}
			w = v
		}
		rel := strings.TrimPrefix(w, "./")
		top, _, _ := strings.Cut(rel, "/")
		if !env.topDirs[top] || strings.ContainsAny(rel, "$*?{}") {
			continue
		}
		if !env.exists(strings.TrimSuffix(rel, "/")) {
			p.errorf(line, "%s: %s is no file of the repository", shellJoin(words), w)
		}
	}
}

// needsTopology says whether a reservoir command cannot run without a
// topology (serve, reconcile, rollout; migrate unless it is given a DSN).
func (p *docPage) needsTopology(sub string, flags map[string]bool) bool {
	switch sub {
	case "serve", "reconcile", "rollout":
		return true
	case "migrate":
		return !flags["dsn"] && !p.set["RESERVOIR_DSN"]
	}
	return false
}

// checkReservoir checks a reservoir command: words[0] is the binary.
func (p *docPage) checkReservoir(line int, words []string, env *docEnv) {
	p.reservoir++
	cmd := shellJoin(words)
	if words[0] != reservoirBinaries[0] {
		p.errorf(line, "%s: from the checkout the binary is %s (make build), not %s", cmd, reservoirBinaries[0], words[0])
	}
	if len(words) < 2 || strings.HasPrefix(words[1], "-") {
		p.errorf(line, "%s: no command (reservoir COMMAND [flags])", cmd)
		return
	}
	sub := words[1]
	base, ok := env.help(sub)
	if !ok {
		p.errorf(line, "%s: reservoir has no command %q", cmd, sub)
		return
	}
	// The action: the first word whose help names it in its usage.
	help, action := base, ""
	for _, w := range words[2:] {
		if !actionWord.MatchString(w) {
			continue
		}
		if h, ok := env.help(sub, w); ok && usageWords(h)[w] {
			help, action = h, w
			break
		}
	}
	if sub == "rollout" && action == "" {
		p.errorf(line, "%s: no rollout action", cmd)
		return
	}
	takesValue, _ := helpFlags(help)
	name := strings.TrimSpace("reservoir " + sub + " " + action)
	given := map[string]bool{}
	allowed := usageWords(help)
	for i := 2; i < len(words); i++ {
		w := words[i]
		if w == "--" {
			break
		}
		if !strings.HasPrefix(w, "-") || w == "-" {
			if w != action && !allowed[w] {
				p.errorf(line, "%s: %s takes no argument %q", cmd, name, w)
			}
			continue
		}
		flag, value, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
		tv, known := takesValue[flag]
		if !known {
			p.errorf(line, "%s: %s has no flag --%s (its -h lists them)", cmd, name, flag)
			continue
		}
		given[flag] = true
		if tv && !hasValue {
			if i+1 == len(words) {
				p.errorf(line, "%s: --%s needs a value", cmd, flag)
				continue
			}
			i++
			value = words[i]
		}
		if tv && placeholder.MatchString(value) {
			p.errorf(line, "%s: --%s %s is a placeholder: give a value that runs as written (the example topology's)", cmd, flag, value)
		}
		if tv && flag == "pod" && !env.pods[value] {
			p.errorf(line, "%s names pod %q, which no example topology has (pods: %s)", cmd, value, podList(env))
		}
		if sub == "serve" || (sub == "demo" && action == "") {
			if port := listenPort(value); port != "" && (flag == "addr" || flag == "admin-addr") {
				ls := docListener{"checkout", name + " --addr"}
				switch {
				case flag == "admin-addr":
					ls = docListener{"admin", name + " --admin-addr"}
				case sub == "demo":
					ls = docListener{"both", name + " --addr"}
				}
				p.listeners[port] = ls
			}
		}
	}
	if p.needsTopology(sub, given) && !given["topology"] && !p.set["RESERVOIR_TOPOLOGY"] {
		p.errorf(line, "%s: no topology: give --topology FILE, or export RESERVOIR_TOPOLOGY before it on the page", cmd)
	}
}

// checkSynopsis checks a synopsis line (words after the binary): the
// command exists, and every flag it names is one of the command's or of
// one of the actions it names.
func (p *docPage) checkSynopsis(line int, words []string, env *docEnv) {
	if len(words) == 0 {
		return
	}
	sub := words[0]
	base, ok := env.help(sub)
	if !ok {
		p.errorf(line, "synopsis %q: reservoir has no command %q", shellJoin(words), sub)
		return
	}
	takes, _ := helpFlags(base)
	known := map[string]bool{}
	for f := range takes {
		known[f] = true
	}
	text := strings.Join(words[1:], " ")
	var actions []string
	for _, w := range synWord.FindAllStringSubmatch(text, -1) {
		actions = append(actions, w[1])
	}
	if slices.Contains(strings.Fields(text), "ACTION") {
		actions = append(actions, helpActions(base)...) // "rollout ACTION": any action's
	}
	for _, a := range actions {
		if h, ok := env.help(sub, a); ok && usageWords(h)[a] {
			fl, _ := helpFlags(h)
			for f := range fl {
				known[f] = true
			}
		}
	}
	for _, m := range synFlag.FindAllStringSubmatch(text, -1) {
		if !known[m[1]] {
			p.errorf(line, "synopsis %q: reservoir %s has no flag --%s", shellJoin(words), sub, m[1])
		}
	}
}

// curlValueFlags are curl's options that take a value.
var curlValueFlags = map[string]bool{
	"-X": true, "--request": true, "-H": true, "--header": true, "-d": true, "--data": true, "--data-raw": true,
	"--data-binary": true, "--data-urlencode": true, "--json": true, "-o": true, "--output": true, "-u": true,
	"--user": true, "-w": true, "--write-out": true, "-m": true, "--max-time": true, "--connect-timeout": true,
	"-T": true, "--upload-file": true, "-F": true, "--form": true, "-A": true, "--user-agent": true, "-e": true,
	"--cacert": true, "--cert": true, "--key": true, "-b": true, "--cookie": true, "-c": true, "-x": true, "--proxy": true,
}

// checkCurl checks a curl command against the listeners and the routes.
func (p *docPage) checkCurl(line int, words []string, forwards map[string]docListener, env *docEnv) {
	p.curls++
	cmd := shellJoin(words)
	var (
		method, rawURL, body string
		headers              []string
		hasBody, jsonFlag    bool
	)
	for i := 1; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "-") {
			if rawURL == "" {
				rawURL = w
			}
			continue
		}
		opt, value, inline := strings.Cut(w, "=")
		if !strings.HasPrefix(w, "--") {
			opt, value, inline = w[:2], w[2:], len(w) > 2
		}
		if !curlValueFlags[opt] {
			continue
		}
		if !inline {
			if i+1 == len(words) {
				p.errorf(line, "%s: %s needs a value", cmd, opt)
				return
			}
			i++
			value = words[i]
		}
		switch opt {
		case "-X", "--request":
			method = value
		case "-H", "--header":
			headers = append(headers, value)
		case "--json":
			jsonFlag = true
			fallthrough
		case "-d", "--data", "--data-raw", "--data-binary", "--data-urlencode":
			hasBody, body = true, value
		}
	}
	if method == "" {
		method = "GET"
		if hasBody {
			method = "POST"
		}
	}
	if rawURL == "" {
		p.errorf(line, "%s: no URL", cmd)
		return
	}
	if !strings.Contains(rawURL, "://") {
		rawURL = "http://" + rawURL
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		p.errorf(line, "%s: the URL: %v", cmd, err)
		return
	}
	port := u.Port()
	ls, ok := forwards[port]
	if !ok {
		ls, ok = p.listeners[port]
	}
	if !ok {
		ls, ok = env.listeners[port]
	}
	if !ok {
		p.errorf(line, "%s: port %q is no listener of the example (%s)", cmd, port, listenerList(env))
		return
	}
	sent := slices.Clone(headers)
	if jsonFlag {
		sent = append(sent, "Content-Type: application/json")
	}
	p.calls = append(p.calls, docCall{where: fmt.Sprintf("%s:%d", p.rel, line), listener: ls.name, method: method,
		target: u.RequestURI(), headers: sent, body: body, hasBody: hasBody})
	route, problem := matchRoute(env.routes, ls.name, method, u.Path)
	if problem != "" {
		p.errorf(line, "%s: %s %s on port %s (%s): %s", cmd, method, u.Path, port, ls.how, problem)
		return
	}
	header := func(name string) (string, bool) {
		for _, h := range headers {
			if k, v, ok := strings.Cut(h, ":"); ok && strings.EqualFold(strings.TrimSpace(k), name) {
				return strings.TrimSpace(v), true
			}
		}
		return "", false
	}
	auth, _ := header("Authorization")
	bearer := len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ")
	switch {
	case route.token && !bearer:
		p.errorf(line, "%s: %s needs an admin token: -H \"Authorization: Bearer $OPERATOR_TOKEN\" (reservoir operators new; or the shared $RESERVOIR_ADMIN_TOKEN)", cmd, route.pattern)
	case route.listener == "checkout" && !bearer:
		p.errorf(line, "%s: %s needs a client's token: -H \"Authorization: Bearer $TOKEN\" (reservoir clients new)", cmd, route.pattern)
	}
	if route.body {
		ct, _ := header("Content-Type")
		if !jsonFlag && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
			p.errorf(line, "%s: %s takes a JSON body: add -H \"Content-Type: application/json\" (curl -d sends a form), or use --json", cmd, route.pattern)
		}
	}
	if hasBody {
		if b := strings.TrimSpace(body); strings.HasPrefix(b, "{") || strings.HasPrefix(b, "[") {
			if !json.Valid([]byte(b)) {
				p.errorf(line, "%s: the body is not valid JSON: %s", cmd, b)
			}
		}
	}
}

func listenerList(env *docEnv) string {
	var out []string
	for port, l := range env.listeners {
		out = append(out, fmt.Sprintf("%s: %s", port, l.how))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// matchRoute finds the route that answers method and path on the
// listener, as the server's ServeMux would; problem says why none does
// (no such path, only on the other listener, another method).
func matchRoute(routes []docRoute, listener, method, path string) (docRoute, string) {
	muxes := map[string]*http.ServeMux{"checkout": http.NewServeMux(), "admin": http.NewServeMux(), "both": http.NewServeMux()}
	byPattern := map[string]docRoute{}
	for _, r := range routes {
		byPattern[r.pattern] = r
		h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
		muxes[r.listener].Handle(r.pattern, h)
		muxes["both"].Handle(r.pattern, h)
	}
	lookup := func(name string) (docRoute, int, string) {
		req := httptest.NewRequest(method, path, nil)
		h, pattern := muxes[name].Handler(req)
		if pattern != "" {
			return byPattern[pattern], http.StatusOK, ""
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return docRoute{}, rec.Code, rec.Header().Get("Allow")
	}
	r, code, allow := lookup(listener)
	switch {
	case code == http.StatusOK:
		return r, ""
	case code == http.StatusMethodNotAllowed:
		return r, fmt.Sprintf("405: the path is served with %s only", allow)
	}
	for _, other := range []string{"checkout", "admin"} {
		if other == listener {
			continue
		}
		if _, code, _ := lookup(other); code != http.StatusNotFound {
			return r, fmt.Sprintf("404: this listener does not serve it; the %s listener does", other)
		}
	}
	return r, "404: no route of internal/server has this path"
}

// docPages returns README.md and every Markdown page under docs/.
func docPages(t *testing.T, root string) []string {
	var out []string
	for _, rel := range markdownFiles(t, root) {
		if rel == "README.md" || strings.HasPrefix(rel, "docs/") {
			out = append(out, rel)
		}
	}
	return out
}

// Every command of README.md and docs/ runs as written: see the top of
// this file.
func TestDocCommandsRunAsWritten(t *testing.T) {
	root := thisRepo.root
	env := newDocEnv(t, root)
	if len(env.routes) < 15 || !slices.ContainsFunc(env.routes, func(r docRoute) bool {
		return r.pattern == "POST /admin/killswitch" && r.listener == "admin" && r.token
	}) || !slices.ContainsFunc(env.routes, func(r docRoute) bool {
		return r.pattern == "POST /v1/shops/{shop}/reservations" && r.listener == "checkout" && r.body
	}) {
		t.Fatalf("read the routes %v from internal/server/api.go: the scan is broken", env.routes)
	}
	if len(env.pods) < 2 || len(env.services) < 2 || !env.targets["demo"] {
		t.Fatalf("pods %v, services %v, make targets %v: the scan is broken", env.pods, env.services, env.targets)
	}
	reservoir, curls := 0, 0
	for _, rel := range docPages(t, root) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		page := commandProblems(rel, string(b), env)
		for _, p := range page.problems {
			t.Error(p)
		}
		reservoir += page.reservoir
		curls += page.curls
	}
	if reservoir < 20 || curls < 4 {
		t.Fatalf("checked only %d reservoir and %d curl commands: the scan is broken", reservoir, curls)
	}
	t.Logf("checked %d reservoir and %d curl commands", reservoir, curls)
}

// The checks fail on each kind of command that does not run as written,
// and pass good ones.
func TestDocCommandChecksCatchBreakage(t *testing.T) {
	env := newDocEnv(t, thisRepo.root)
	block := func(lang, body string) string { return "# Page\n\n```" + lang + "\n" + body + "\n```\n" }
	good := block("sh", `export RESERVOIR_ADMIN_TOKEN=$(openssl rand -hex 16)
bin/reservoir serve --topology /etc/reservoir/topology.toml --clients /etc/reservoir/clients.toml \
    --addr 0.0.0.0:8080 --admin-addr 0.0.0.0:8081   # a comment: --nosuchflag
curl -s -X POST -H "Authorization: Bearer $RESERVOIR_ADMIN_TOKEN" -H "X-Reservoir-Actor: alice" \
  -d '{"scope":"pod:pod-b","reason":"mismatch spike, INC-123"}' http://127.0.0.1:8081/admin/killswitch
curl -s -X DELETE -H "Authorization: Bearer $RESERVOIR_ADMIN_TOKEN" "http://127.0.0.1:8081/admin/killswitch?scope=pod:pod-b&reason=fixed"
curl -s localhost:8081/readyz
read -rs T   # a client's token
curl -s -H "Authorization: Bearer $T" -H 'Content-Type: application/json' -d '{"items":[]}' localhost:8080/v1/shops/1/reservations
bin/reservoir rollout --topology /etc/reservoir/topology.toml kill --scope pod:pod-b --state redis --reason "p99 over 2s"
bin/reservoir migrate --topology /etc/reservoir/topology.toml --create up
read -rs RESERVOIR_DSN && export RESERVOIR_DSN
bin/reservoir migrate --set control --create up
bin/reservoir clients new --name checkout-web --roles checkout
make demo
kubectl apply -f deploy/kubernetes/base/configmap.yaml
kubectl port-forward svc/reservoir-admin 9000:8081 &
curl -s localhost:9000/healthz`) +
		block("", `reservoir rollout   init|status|advance|kill|release|history|auto|order-pods --topology FILE [the action's flags]
reservoir migrate --topology FILE [--create] up|status
reservoir rollout advance: refused: the gates of stage "shadow" do not pass (2 of 6 fail):`) +
		block("", "$ bin/reservoir rollout stauts\nreservoir rollout: unknown action \"stauts\"; did you mean \"status\"?\nRun 'reservoir rollout -h' for usage.") +
		block("json", `{"curl": "curl localhost:1/nowhere"}`)
	if page := commandProblems("docs/good.md", good, env); len(page.problems) != 0 || page.reservoir != 5 || page.curls != 5 {
		t.Errorf("a good page: %d reservoir and %d curl commands (want 5 and 5), problems:\n%s", page.reservoir, page.curls, strings.Join(page.problems, "\n"))
	}
	for _, c := range []struct{ doc, want string }{
		// The kill switch sent to the checkout listener (docs/api.md before).
		{block("sh", `curl -s -X POST -H "Authorization: Bearer $TOKEN" -d '{"scope":"pod:pod-a","reason":"r"}' http://127.0.0.1:8080/admin/killswitch`),
			"POST /admin/killswitch on port 8080 (serve's --addr 127.0.0.1:8080): 404: this listener does not serve it; the admin listener does"},
		{block("sh", `curl -s localhost:8081/v1/shops/1/items/2/availability`), "the checkout listener does"},
		{block("sh", `curl -s localhost:8081/admin/nothing`), "no route of internal/server has this path"},
		{block("sh", `curl -s -X PUT -H "Authorization: Bearer $T" localhost:8081/admin/killswitch`), "served with DELETE, POST only"},
		{block("sh", `curl -s localhost:8081/admin/rollout/status`), "needs an admin token"},
		{block("sh", `curl -s localhost:8080/v1/shops/1/items/2/availability`), "needs a client's token"},
		{block("sh", `curl -s -H "Authorization: Bearer $T" -d '{}' localhost:8080/v1/shops/1/reservations`), "takes a JSON body"},
		{block("sh", `curl -s -H "Authorization: Bearer $T" -d '{"scope":' localhost:8081/admin/killswitch`), "not valid JSON"},
		{block("sh", `curl -s localhost:9999/healthz`), `port "9999" is no listener`},
		{block("sh", `curl -s -H "Authorization: Bearer $TOKEN" localhost:8081/admin/stats`), "$TOKEN is set nowhere before it"},
		{block("sh", `kubectl port-forward svc/reservoir 8081:8081`), "has no Service reservoir with port 8081"},
		{block("sh", "kubectl port-forward svc/reservoir 8081:8080 &\ncurl -s localhost:8081/healthz"), "the admin listener does"},
		{block("sh", `reservoir rollout --topology /t kill --scope global --reason r`), "the binary is bin/reservoir (make build), not reservoir"},
		{block("sh", `go run ./cmd/reservoir demo`), "instead of go run"},
		{block("sh", `bin/reservoir rollout --topology /t stauts`), "no rollout action"},
		{block("sh", `bin/reservoir deploy`), `no command "deploy"`},
		{block("sh", `bin/reservoir rollout --topology /t kill --scope global --reason r --forcibly`), "has no flag --forcibly"},
		{block("sh", `bin/reservoir rollout --topology FILE init`), "--topology FILE is a placeholder"},
		{block("sh", `bin/reservoir rollout status`), "no topology"},
		{block("sh", `bin/reservoir migrate --create up`), "no topology"},
		{block("sh", `bin/reservoir migrate --topology /t sideways`), `takes no argument "sideways"`},
		{block("sh", `bin/reservoir rollout --topology /t kill --scope pod:pod-x --reason r`), `names pod "pod-x"`},
		{block("sh", `bin/reservoir reconcile --topology /t --pod pod-x`), `names pod "pod-x"`},
		{block("sh", `bin/reservoir serve --topology deploy/topology.toml`), "deploy/topology.toml is no file of the repository"},
		{block("sh", `kubectl apply -n reservoir -f deploy/kubernetes/servicemonitor.yaml`), "deploy/kubernetes/servicemonitor.yaml is no file of the repository"},
		{block("sh", `make nosuchtarget`), `no target "nosuchtarget"`},
		{block("", `reservoir rollout status --topology FILE      # stage, each pod's mode`), "label the block sh"},
		{block("", `reservoir rollout [--topology FILE] [--bogus]`), "has no flag --bogus"},
		{block("", `reservoir deploy [--topology FILE]`), `no command "deploy"`},
	} {
		page := commandProblems("docs/bad.md", c.doc, env)
		if !slices.ContainsFunc(page.problems, func(s string) bool { return strings.Contains(s, c.want) }) {
			t.Errorf("%s\nwant a problem saying %q, got:\n%s", c.doc, c.want, strings.Join(page.problems, "\n"))
		}
	}
}
