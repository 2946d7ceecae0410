package deploy_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/rollout"
)

// The repository's documentation stands alone: a reader who clones it has
// every page a page links to, and the pages say what the code does. These
// tests hold every Markdown file to the repository (no link leaves it, no
// relative link is broken, no anchor is missing) and three pages to the
// code: docs/topology.md names every topology key, docs/compare.md every
// comparer class, and docs/rollout.md the plan's default gates.

// outsideBrief is text no file of the repository may contain: the path of
// a document that lives outside it. Built in two parts so that this file
// does not contain it.
var outsideBrief = []string{".." + "/shared", "shared/" + "DESIGN.md"}

// exampleHosts are the hosts a URL in prose may name: examples, not links.
var exampleHosts = regexp.MustCompile(`^(localhost|127\.0\.0\.1|host|[a-z0-9.-]*example(\.[a-z]+)?)(:|/|$)`)

var (
	mdFence     = regexp.MustCompile("(?ms)^[ \t]*(```|~~~).*?^[ \t]*(```|~~~)[ \t]*$")
	mdCodeSpan  = regexp.MustCompile("`[^`\n]*`")
	mdInline    = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	mdRefDef    = regexp.MustCompile(`(?m)^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	mdAutolink  = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9+.-]*:[^>\s]*)>`)
	mdBareURL   = regexp.MustCompile(`https?://[^\s)>\]"'` + "`" + `]+`)
	mdHeading   = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
	mdHTMLAnchr = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	mdScheme    = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// markdownFiles lists the repository's Markdown files (relative, slash
// separated), skipping hidden directories and test data.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && p != root && (strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata" || e.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// headingAnchors returns the anchors a Markdown page's headings get, as
// GitHub makes them: lower case, punctuation dropped, spaces to hyphens,
// "-1", "-2", ... for repeats; and explicit <a name|id="..."> anchors.
func headingAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, m := range mdHeading.FindAllStringSubmatch(mdFence.ReplaceAllString(doc, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	for _, m := range mdHTMLAnchr.FindAllStringSubmatch(doc, -1) {
		anchors[m[1]] = true
	}
	return anchors
}

// linkProblems checks the links of one Markdown file, rel (relative to
// root, slash separated), with content doc. read returns another file's
// content (for its anchors); exists says whether a path relative to root
// exists.
func linkProblems(rel, doc string, exists func(string) bool, read func(string) (string, error)) []string {
	var out []string
	for _, needle := range outsideBrief {
		if strings.Contains(doc, needle) {
			out = append(out, fmt.Sprintf("%s mentions %s, which is outside the repository", rel, needle))
		}
	}
	prose := mdCodeSpan.ReplaceAllString(mdFence.ReplaceAllString(doc, ""), "")
	var targets []string
	for _, re := range []*regexp.Regexp{mdInline, mdRefDef, mdAutolink} {
		for _, m := range re.FindAllStringSubmatch(prose, -1) {
			targets = append(targets, m[1])
		}
	}
	for _, u := range mdBareURL.FindAllString(prose, -1) {
		if !slices.Contains(targets, u) {
			targets = append(targets, u)
		}
	}
	own := headingAnchors(doc)
	for _, target := range targets {
		if mdScheme.MatchString(target) {
			host, ok := strings.CutPrefix(target, "http://")
			if !ok {
				host, ok = strings.CutPrefix(target, "https://")
			}
			if !ok || !exampleHosts.MatchString(strings.ToLower(host)) {
				out = append(out, fmt.Sprintf("%s links outside the repository: %s", rel, target))
			}
			continue
		}
		p, anchor, _ := strings.Cut(target, "#")
		if p == "" {
			if anchor != "" && !own[anchor] {
				out = append(out, fmt.Sprintf("%s links to #%s, which is no heading of it", rel, anchor))
			}
			continue
		}
		if strings.HasPrefix(p, "/") {
			out = append(out, fmt.Sprintf("%s links to %s: use a path relative to the page", rel, target))
			continue
		}
		joined := filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(rel), p)))
		if joined == ".." || strings.HasPrefix(joined, "../") {
			out = append(out, fmt.Sprintf("%s links to %s, outside the repository", rel, target))
			continue
		}
		if !exists(joined) {
			out = append(out, fmt.Sprintf("%s links to %s, which does not exist (%s)", rel, target, joined))
			continue
		}
		if anchor != "" && strings.HasSuffix(joined, ".md") {
			other, err := read(joined)
			if err != nil {
				out = append(out, fmt.Sprintf("%s links to %s: %v", rel, target, err))
			} else if !headingAnchors(other)[anchor] {
				out = append(out, fmt.Sprintf("%s links to %s, but %s has no heading #%s", rel, target, joined, anchor))
			}
		}
	}
	return out
}

// No Markdown file of the repository links outside it or to a page or
// heading it does not have, and none mentions the design brief that lives
// outside it.
func TestMarkdownLinksStayInRepository(t *testing.T) {
	root := thisRepo.root
	files := markdownFiles(t, root)
	for _, want := range []string{"README.md", "docs/design.md", "docs/compare.md", "docs/topology.md", "docs/rollout.md"} {
		if !slices.Contains(files, want) {
			t.Errorf("%s not found among the Markdown files %v: the walk is broken, or the page is gone", want, files)
		}
	}
	exists := func(rel string) bool {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
		return err == nil
	}
	read := func(rel string) (string, error) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		return string(b), err
	}
	links := 0
	for _, rel := range files {
		doc, err := read(rel)
		if err != nil {
			t.Fatal(err)
		}
		links += len(mdInline.FindAllString(doc, -1))
		for _, p := range linkProblems(rel, doc, exists, read) {
			t.Error(p)
		}
	}
	if links < 20 {
		t.Fatalf("only %d links found in %d Markdown files: the scan is broken", links, len(files))
	}
}

// The link check fails on each kind of bad link, and passes good ones.
func TestMarkdownLinkCheckCatchesBreakage(t *testing.T) {
	files := map[string]string{
		"README.md":    "# Top\n",
		"docs/a.md":    "# A page\n\n## The kill switch (on call)\n",
		"docs/pic.png": "",
	}
	exists := func(rel string) bool { _, ok := files[rel]; return ok }
	read := func(rel string) (string, error) {
		if s, ok := files[rel]; ok {
			return s, nil
		}
		return "", os.ErrNotExist
	}
	good := "# Here\n\n[a](a.md), [b](a.md#the-kill-switch-on-call), [c](#here), ![p](pic.png), [r](../README.md)\n" +
		"Browse to http://127.0.0.1:8080/ or https://shop.example/x.\n\n" +
		"```json\n{\"$schema\": \"https://flagd.dev/schema/v0/flags.json\", \"x\": \"[y](../../nowhere.md)\"}\n```\n" +
		"Inline code is no link: `[z](missing.md)`.\n"
	if p := linkProblems("docs/good.md", good, exists, read); len(p) != 0 {
		t.Errorf("a good page has problems: %q", p)
	}
	for _, c := range []struct{ doc, want string }{
		{"[d](" + outsideBrief[0] + "/x.md)", "outside the repository"},
		{"see " + outsideBrief[1] + " for the brief", "outside the repository"},
		{"[d](../../x.md)", "outside the repository"},
		{"[d](missing.md)", "does not exist"},
		{"[d](a.md#nowhere)", "has no heading #nowhere"},
		{"[d](#nowhere)", "no heading of it"},
		{"[d](https://github.com/some/repo)", "links outside the repository"},
		{"read https://flagd.dev/docs first", "links outside the repository"},
		{"<https://flagd.dev/>", "links outside the repository"},
		{"[d]: https://flagd.dev/", "links outside the repository"},
		{"[d](/docs/a.md)", "relative to the page"},
	} {
		p := linkProblems("docs/bad.md", "# Bad\n\n"+c.doc+"\n", exists, read)
		if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, c.want) }) {
			t.Errorf("%q: want a problem saying %q, got %q", c.doc, c.want, p)
		}
	}
}

// tomlKeys lists the toml keys of a struct type and, with prefix, of the
// structs it holds (a pod's keys as "pods[].name").
func tomlKeys(typ reflect.Type, prefix string) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, prefix+name)
		inner := f.Type
		for inner.Kind() == reflect.Slice || inner.Kind() == reflect.Pointer {
			inner = inner.Elem()
		}
		if inner.Kind() == reflect.Struct && inner.PkgPath() == typ.PkgPath() {
			out = append(out, tomlKeys(inner, prefix+name+"[].")...)
		}
	}
	return out
}

// docs/topology.md documents every key of the topology file, as a table
// row of its own.
func TestTopologyKeysDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(thisRepo.root, "docs", "topology.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	keys := tomlKeys(reflect.TypeFor[topology.Config](), "")
	if len(keys) < 20 || !slices.Contains(keys, "pods[].pool_cap") {
		t.Fatalf("found only the keys %v: the scan is broken", keys)
	}
	for _, k := range keys {
		leaf := k[strings.LastIndex(k, ".")+1:]
		if !strings.Contains(doc, "| `"+leaf+"` |") {
			t.Errorf("docs/topology.md has no table row for the topology key %s (a row starting | `%s` |)", k, leaf)
		}
	}
}

// docs/compare.md describes every class the comparer gives, as a table row
// of its own.
func TestCompareClassesDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(thisRepo.root, "docs", "compare.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if len(compare.Classes) < 5 {
		t.Fatalf("compare.Classes is %v", compare.Classes)
	}
	for _, c := range compare.Classes {
		if !strings.Contains(doc, "| `"+string(c)+"` |") {
			t.Errorf("docs/compare.md has no table row for the class %s (a row starting | `%s` |)", c, c)
		}
	}
}

// docs/rollout.md's "Default gates" table holds the defaults a plan's
// stages get.
func TestDefaultGatesDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(thisRepo.root, "docs", "rollout.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "### Default gates")
	if !ok {
		t.Fatal(`docs/rollout.md has no "### Default gates" section`)
	}
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	p, err := rollout.ParsePlan([]byte("pods = [\"a\"]\n[[stages]]\nname = \"s\"\nmode = \"shadow\"\npods = [\"a\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := p.Stages[0].Gates
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	dur := g.MinDuration.String()
	switch d := g.MinDuration.Duration; {
	case d%time.Hour == 0:
		dur = fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		dur = fmt.Sprintf("%dm", d/time.Minute)
	}
	latency := num(g.MaxLatencyRatio)
	if g.MaxLatencyRatio == 0 {
		latency = "0 (off)"
	}
	for gate, want := range map[string]string{
		"min_observations":      strconv.FormatInt(g.MinObservations, 10),
		"min_duration":          "`" + dur + "`",
		"max_shadow_error_rate": num(g.MaxShadowErrorRate),
		"max_latency_ratio":     latency,
	} {
		row := "| `" + gate + "` | " + want + " |"
		if !strings.Contains(section, row) {
			t.Errorf("docs/rollout.md's default gates: want the row %q", row)
		}
	}
	_, row, ok := strings.Cut(section, "| `max_rates` | ")
	if row, _, _ = strings.Cut(row, "\n"); !ok {
		t.Fatal("docs/rollout.md's default gates: no row for max_rates")
	}
	if len(g.MaxRates) == 0 {
		t.Fatal("the plan's default max_rates are empty")
	}
	for c, v := range g.MaxRates {
		if want := "`" + string(c) + "` " + num(v); !strings.Contains(row, want) {
			t.Errorf("docs/rollout.md's default gates: the max_rates row %q does not say %q", row, want)
		}
	}
	if n := strings.Count(row, "`") / 2; n != len(g.MaxRates) {
		t.Errorf("docs/rollout.md's default gates: the max_rates row %q names %d classes, the default has %d", row, n, len(g.MaxRates))
	}
}

// The example plan and the example topology are one deployment: the
// topology loads (given its secrets), and the plan checks against it as
// serve and every rollout action check it (Plan.CheckPods): every pod the
// plan names is one the topology defines, and the plan lists every pod
// the topology has. Before, the plan named pod-a, which the topology did
// not define: `reservoir serve` with both refused to start.
func TestExamplePlanMatchesTheExampleTopology(t *testing.T) {
	b, err := os.ReadFile("topology.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	// Its secrets: the variables it names set, its files mounted here.
	dir := t.TempDir()
	text := strings.ReplaceAll(string(b), "/etc/reservoir/secrets/", dir+"/")
	for _, m := range regexp.MustCompile(`"file:`+regexp.QuoteMeta(dir)+`/([^"]+)"`).FindAllStringSubmatch(text, -1) {
		secret := "secret"
		if strings.HasSuffix(m[1], "-dsn") {
			secret = "reservoir:pw@tcp(mysql:3306)/reservoir"
		}
		if err := os.WriteFile(filepath.Join(dir, m[1]), []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).FindAllStringSubmatch(text, -1) {
		t.Setenv(m[1], "pw")
	}
	topo, err := topology.Parse([]byte(text))
	if err != nil {
		t.Fatalf("deploy/topology.example.toml: %v", err)
	}
	plan, err := rollout.LoadPlan("plan.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.CheckPods(topo.PodNames()); err != nil {
		t.Errorf("deploy/plan.example.toml against deploy/topology.example.toml: %v", err)
	}
	for _, p := range topo.PodNames() {
		if !slices.Contains(plan.Pods, p) {
			t.Errorf("deploy/plan.example.toml leaves out pod %q of deploy/topology.example.toml: its pods list every pod", p)
		}
	}
}
