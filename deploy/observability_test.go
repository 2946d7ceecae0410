package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/internal/testtier"
	"github.com/seed31b0e981/reservoir/internal/topology"
)

// Prometheus and Grafana as a platform team runs them (docs/runbooks.md,
// "Setting up"): a Kubernetes scrape adds target labels to every series,
// the alerts and the board must group by the topology's pod under them,
// every alert has a runbook and a promtool test, and the ServiceMonitor
// scrapes the admin listener that serves /metrics.

// podLabel is the label of the topology's pod on every per-pod metric.
const podLabel = "reservoir_pod"

// targetLabels are the labels a Kubernetes scrape sets on every series:
// the Prometheus Operator's ServiceMonitor and PodMonitor set all of them,
// kubernetes_sd_configs with the usual relabelling most. A metric label
// of the same name is renamed exported_<name> (honor_labels off) or
// replaces the target's (on): either breaks what groups by it.
var targetLabels = []string{"pod", "namespace", "instance", "job", "container", "service", "endpoint"}

// servedMetrics is every metric a served cell exports, with its label
// names: the descriptors of every collector the cell registers (so a
// vector with no series yet counts), and the series of a scrape of the
// admin listener's /metrics after a few calls (the server's own metrics).
type servedMetrics struct {
	labels map[string]map[string]bool // metric name -> label names
}

// perPod reports whether metric (a family or a histogram's series name)
// carries the pod label, and whether it is exported at all.
func (m *servedMetrics) perPod(metric string) (perPod, known bool) {
	ls, ok := m.lookup(metric)
	return ls[podLabel], ok
}

func (m *servedMetrics) lookup(metric string) (map[string]bool, bool) {
	if ls, ok := m.labels[metric]; ok {
		return ls, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if ls, ok := m.labels[strings.TrimSuffix(metric, suffix)]; ok && strings.HasSuffix(metric, suffix) {
			if suffix == "_bucket" {
				ls = maps.Clone(ls)
				ls["le"] = true
			}
			return ls, true
		}
	}
	if metric == "up" {
		return map[string]bool{}, true
	}
	return nil, false
}

// describing passes registrations on and keeps every descriptor.
type describing struct {
	prometheus.Registerer
	mu    sync.Mutex
	descs []*prometheus.Desc
}

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	d.mu.Lock()
	for desc := range ch {
		d.descs = append(d.descs, desc)
	}
	d.mu.Unlock()
	return d.Registerer.Register(c)
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

// A Desc's String is its only public view of its labels:
// Desc{fqName: "...", help: "...", unit: "...", constLabels: {a="x",b="y"}, variableLabels: {c,d}}
var (
	descName   = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`constLabels: \{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*)\}, variableLabels: \{([^}]*)\}\}$`)
	labelName  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)=`)
)

var servedCell = sync.OnceValues(serveCell)

// serveCell opens a cell of two pods whose stores are on a closed port of
// the loopback (Open pings nothing, so it needs no server), serves it,
// makes a checkout call, a refused call, an unauthenticated admin call and
// scrapes /metrics on the admin listener: what `reservoir serve` exports.
func serveCell() (*servedMetrics, error) {
	dir, err := os.MkdirTemp("", "reservoir-deploy-metrics-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	closed := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return nil, err
	}
	flags, err := os.ReadFile(filepath.Join(thisRepo.root, "deploy", "flags", "reservoir.flagd.json"))
	if err != nil {
		return nil, err
	}
	flagsFile := filepath.Join(dir, "flags.json")
	if err := os.WriteFile(flagsFile, flags, 0o600); err != nil {
		return nil, err
	}
	topo := fmt.Sprintf(`control_dsn = "reservoir@tcp(%[1]s)/reservoir_control"
flags_file = %[2]q

[[pods]]
name = "pod-a"
mysql_dsn = "reservoir@tcp(%[1]s)/reservoir"
redis_addr = %[1]q
shops = [1]

[[pods]]
name = "pod-b"
mysql_dsn = "reservoir@tcp(%[1]s)/reservoir"
redis_addr = %[1]q
redis_prefix = "b:"
shops = [2]
`, closed, flagsFile)
	topoFile := filepath.Join(dir, "topology.toml")
	if err := os.WriteFile(topoFile, []byte(topo), 0o600); err != nil {
		return nil, err
	}
	tp, err := topology.Load(topoFile)
	if err != nil {
		return nil, err
	}
	reg := server.NewRegistry()
	rec := &describing{Registerer: reg}
	quiet := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := cell.Open(ctx, cell.Config{Topology: tp, Registerer: rec, Logger: quiet, ReapInterval: -1, HealthInterval: -1, NoRelay: true})
	if err != nil {
		return nil, fmt.Errorf("open the cell: %w", err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = c.Close(cctx)
	}()
	srv, err := server.New(server.Config{Cell: c, Registry: reg, InsecureNoAuth: true, AdminToken: "deploy-test-token", Logger: quiet, RequestTimeout: 3 * time.Second})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, apiLn, adminLn) }()
	defer func() { cancel(); <-done }()

	client := &http.Client{Timeout: 10 * time.Second}
	call := func(method, url, contentType, body string) (string, error) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			return "", err
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && method == "GET" && strings.HasSuffix(url, "/metrics") && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET /metrics on the admin listener: %s", resp.Status)
		}
		return string(b), err
	}
	api, admin := "http://"+apiLn.Addr().String(), "http://"+adminLn.Addr().String()
	reserve := `{"token": "deploy-metrics", "lines": [{"item": 7, "quantity": 1, "locations": [1]}]}`
	for _, cl := range []struct{ method, url, contentType, body string }{
		{"POST", api + "/v1/shops/1/reservations", "application/json", reserve}, // reservoir_api_operations_total
		{"POST", api + "/v1/shops/1/reservations", "text/plain", reserve},       // reservoir_api_refused_total
		{"GET", admin + "/admin/rollout/status", "", ""},                        // reservoir_admin_auth_failures_total
		{"GET", admin + "/metrics", "", ""},                                     // reservoir_http_requests_total
	} {
		if _, err := call(cl.method, cl.url, cl.contentType, cl.body); err != nil {
			return nil, err
		}
	}
	scrape, err := call("GET", admin+"/metrics", "", "")
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(scrape))
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	m := &servedMetrics{labels: map[string]map[string]bool{}}
	add := func(name, label string) {
		if m.labels[name] == nil {
			m.labels[name] = map[string]bool{}
		}
		if label != "" {
			m.labels[name][label] = true
		}
	}
	for name, f := range fams {
		add(name, "")
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				add(name, l.GetName())
			}
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, d := range rec.descs {
		s := d.String()
		n, ls := descName.FindStringSubmatch(s), descLabels.FindStringSubmatch(s)
		if n == nil || ls == nil {
			return nil, fmt.Errorf("a metric descriptor in an unknown form: %s", s)
		}
		add(n[1], "")
		for _, l := range labelName.FindAllStringSubmatch(ls[1], -1) {
			add(n[1], l[1])
		}
		for _, l := range strings.Split(ls[2], ",") {
			add(n[1], strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "c("), ")"))
		}
	}
	return m, nil
}

func servedOrFail(t *testing.T) *servedMetrics {
	t.Helper()
	m, err := servedCell()
	if err != nil {
		t.Fatalf("serve a cell to read its metrics: %v", err)
	}
	return m
}

// No metric reservoir serves has a label a Kubernetes scrape sets, and
// the per-pod ones carry the topology's pod as reservoir_pod: a
// ServiceMonitor renames nothing, and no honor_labels is needed.
func TestMetricLabelsSurviveAKubernetesScrape(t *testing.T) {
	checkMetricLabels(t, servedOrFail(t))
}

func checkMetricLabels(t tb, m *servedMetrics) {
	if n := len(m.labels); n < 60 {
		t.Fatalf("only %d metrics served: the collection is broken", n)
	}
	var perPod []string
	for _, name := range slices.Sorted(maps.Keys(m.labels)) {
		if !strings.HasPrefix(name, "reservoir_") {
			continue // the Go runtime's and the process's
		}
		for _, l := range targetLabels {
			if m.labels[name][l] {
				t.Errorf("%s has the label %q, which a Kubernetes scrape sets on every series: the scrape renames it exported_%s and every query by %s breaks (name the topology's pod %s)",
					name, l, l, l, podLabel)
			}
		}
		if m.labels[name][podLabel] {
			perPod = append(perPod, name)
		}
	}
	// The metrics the alerts and the board read per pod, from each part
	// that labels them: the stores, the mirror, the facades, the
	// comparer, the cell and the server.
	for _, name := range []string{"reservoir_mysql_conn_hold_seconds", "reservoir_redis_script_errors_total", "reservoir_mirror_lag_seconds",
		"reservoir_dualwrite_shadow_skipped_total", "reservoir_compare_observations_total", "reservoir_store_call_seconds",
		"reservoir_pod_degraded", "reservoir_api_operations_total", "reservoir_rollout_mode"} {
		if !slices.Contains(perPod, name) {
			t.Errorf("%s does not carry the label %s: the per-pod alerts and panels cannot group it", name, podLabel)
		}
	}
}

// promQL is one expression of the alerts or the board, where it is.
type promQL struct{ where, expr string }

var (
	pqAgg      = regexp.MustCompile(`\b(sum|min|max|avg|count|group|stddev|stdvar|topk|bottomk|quantile|count_values)\s*(?:(by|without)\s*\(([^)]*)\)\s*)?\(`)
	pqAfterAgg = regexp.MustCompile(`^\s*(by|without)\s*\(([^)]*)\)`)
	pqListKw   = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	pqAggOps   = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "count": true, "group": true, "stddev": true, "stdvar": true, "topk": true, "bottomk": true, "quantile": true, "count_values": true}
	pqKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}
	pqMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	pqTemplate = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	pqLabelRef = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
)

// promSelector is one vector selector of an expression: its metric name and
// its matchers (label -> op+value, e.g. `=~"$namespace"`).
type promSelector struct {
	metric   string
	matchers map[string]string
}

// scan reads an expression the way PromQL's lexer would, enough to tell
// its selectors (with their matchers) from its function calls, and its
// label lists (by, without, on, ignoring, group_left, group_right).
func scan(expr string) (sels []promSelector, lists [][]string) {
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	skipSpace := func(i int) int {
		for i < len(expr) && (expr[i] == ' ' || expr[i] == '\n' || expr[i] == '\t') {
			i++
		}
		return i
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"':
			for i++; i < len(expr) && expr[i] != '"'; i++ {
				if expr[i] == '\\' {
					i++
				}
			}
			i++
		case c == '[':
			for i < len(expr) && expr[i] != ']' {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++
			}
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := skipSpace(j)
			switch {
			case pqListKw[word] && k < len(expr) && expr[k] == '(':
				end := strings.IndexByte(expr[k:], ')')
				if end < 0 {
					return sels, lists
				}
				var l []string
				for _, s := range strings.Split(expr[k+1:k+end], ",") {
					if s = strings.TrimSpace(s); s != "" {
						l = append(l, s)
					}
				}
				lists = append(lists, l)
				i = k + end + 1
				continue
			case pqListKw[word] || pqKeywords[strings.ToLower(word)] || pqAggOps[word]:
			case k < len(expr) && expr[k] == '(':
				// a function or an aggregation
			default:
				s := promSelector{metric: word, matchers: map[string]string{}}
				if k < len(expr) && expr[k] == '{' {
					end := strings.IndexByte(expr[k:], '}')
					if end < 0 {
						return sels, lists
					}
					for _, m := range pqMatcher.FindAllStringSubmatch(expr[k+1:k+end], -1) {
						s.matchers[m[1]] = m[2] + `"` + m[3] + `"`
					}
					j = k + end + 1
				}
				sels = append(sels, s)
			}
			i = j
		default:
			i++
		}
	}
	return sels, lists
}

// aggregation is one aggregation of an expression: its grouping and what
// it aggregates.
type aggregation struct {
	op, mode string // mode: by, without or "" (every label dropped)
	labels   []string
	arg      string
}

func aggregations(expr string) []aggregation {
	var out []aggregation
	for _, m := range pqAgg.FindAllStringSubmatchIndex(expr, -1) {
		a := aggregation{op: expr[m[2]:m[3]]}
		if m[4] >= 0 {
			a.mode = expr[m[4]:m[5]]
			a.labels = splitList(expr[m[6]:m[7]])
		}
		open, depth, end := m[1]-1, 0, -1
		for i := open; i < len(expr) && end < 0; i++ {
			switch expr[i] {
			case '(':
				depth++
			case ')':
				if depth--; depth == 0 {
					end = i
				}
			}
		}
		if end < 0 {
			continue
		}
		a.arg = expr[open+1 : end]
		if after := pqAfterAgg.FindStringSubmatch(expr[end+1:]); after != nil && a.mode == "" {
			a.mode, a.labels = after[1], splitList(after[2])
		}
		out = append(out, a)
	}
	return out
}

func splitList(s string) []string {
	var out []string
	for _, l := range strings.Split(s, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// checkPromQL holds one expression to the label choice: it reads metrics
// reservoir serves, names only labels those metrics or the scrape have
// (never the Kubernetes pod), and keeps reservoir_pod in every
// aggregation over a per-pod metric. It returns the labels its
// aggregations keep (for legends and annotations).
func checkPromQL(t tb, m *servedMetrics, q promQL) (kept map[string]bool) {
	sels, lists := scan(q.expr)
	if len(sels) == 0 {
		t.Errorf("%s: no selector found in %q: the scan is broken", q.where, q.expr)
		return nil
	}
	available := map[string]bool{"__name__": true}
	for _, l := range targetLabels {
		available[l] = l != "pod"
	}
	available["cluster"] = true // a multi-cluster store's external label
	var read []string
	for _, s := range sels {
		ls, known := m.lookup(s.metric)
		if !known {
			t.Errorf("%s reads %s, which reservoir does not export", q.where, s.metric)
			continue
		}
		read = append(read, s.metric)
		for l := range ls {
			available[l] = true
		}
	}
	named := map[string]bool{}
	for _, s := range sels {
		for l := range s.matchers {
			named[l] = true
		}
	}
	for _, l := range lists {
		for _, name := range l {
			named[name] = true
		}
	}
	for _, l := range slices.Sorted(maps.Keys(named)) {
		switch {
		case l == "pod" || l == "exported_pod":
			t.Errorf("%s names the label %s: that is the Kubernetes pod a scrape adds (or its renamed copy); the topology's pod is %s", q.where, l, podLabel)
		case !available[l]:
			t.Errorf("%s names the label %s, which none of the metrics it reads (%s) has, nor the scrape", q.where, l, strings.Join(read, ", "))
		}
	}
	kept = map[string]bool{}
	aggs := aggregations(q.expr)
	for _, a := range aggs {
		argSels, _ := scan(a.arg)
		var perPod []string
		pinned := false // the argument selects series without the label on purpose
		for _, s := range argSels {
			if p, _ := m.perPod(s.metric); p {
				perPod = append(perPod, s.metric)
			}
			if s.matchers[podLabel] == `=""` {
				pinned = true
			}
		}
		keeps := a.mode == "by" && slices.Contains(a.labels, podLabel) || a.mode == "without" && !slices.Contains(a.labels, podLabel)
		if len(perPod) > 0 && !keeps && !pinned {
			t.Errorf("%s: %s %s (%s) over %s, which carry %s, adds the pods together: keep %s in the grouping",
				q.where, a.op, a.mode, strings.Join(a.labels, ", "), strings.Join(perPod, ", "), podLabel, podLabel)
		}
		if a.mode == "by" {
			for _, l := range a.labels {
				kept[l] = true
			}
		}
	}
	if len(aggs) == 0 {
		return available
	}
	return kept
}

// rules decodes deploy/prometheus/alerts.yml as the PrometheusRule
// docs/runbooks.md builds from it (the file indented under spec),
// strictly, with the Prometheus Operator's own types.
func rules(t tb, r *repo) []monitoringv1.Rule {
	t.Helper()
	b := r.read(t, filepath.Join(r.root, "deploy", "prometheus", "alerts.yml"))
	var doc bytes.Buffer
	doc.WriteString("apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: reservoir\nspec:\n")
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line != "" {
			doc.WriteString("  " + line)
		}
	}
	var pr monitoringv1.PrometheusRule
	if err := k8syaml.UnmarshalStrict(doc.Bytes(), &pr); err != nil {
		t.Fatalf("deploy/prometheus/alerts.yml as a PrometheusRule (docs/runbooks.md): %v", err)
	}
	var out []monitoringv1.Rule
	for _, g := range pr.Spec.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) < 25 {
		t.Fatalf("deploy/prometheus/alerts.yml: only %d rules", len(out))
	}
	return out
}

// runbookSections returns docs/runbooks.md's level-3 sections by heading.
func runbookSections(t tb, r *repo) (doc string, sections map[string]string) {
	t.Helper()
	doc = string(r.read(t, filepath.Join(r.root, "docs", "runbooks.md")))
	sections = map[string]string{}
	parts := regexp.MustCompile(`(?m)^### `).Split(mdFence.ReplaceAllString(doc, ""), -1)
	for _, p := range parts[1:] {
		heading, body, _ := strings.Cut(p, "\n")
		body, _, _ = strings.Cut(body, "\n## ")
		sections[strings.TrimSpace(heading)] = body
	}
	return doc, sections
}

// Every alert: a runbook section with what it means, what to check and
// what to do, linked from its runbook_url; a severity; a firing case in
// alerts_test.yml; labels the scrape cannot rename. And the scrape itself
// is watched: up, absent().
func TestAlertRules(t *testing.T) { checkAlertRules(t, thisRepo) }

func checkAlertRules(t tb, r *repo) {
	m, err := servedCell()
	if err != nil {
		t.Fatalf("serve a cell to read its metrics: %v", err)
	}
	rs := rules(t, r)
	doc, sections := runbookSections(t, r)
	anchors := headingAnchors(doc)
	firing, tested := alertTests(t, r)
	alerts := map[string]bool{}
	var exprs strings.Builder
	for _, rule := range rs {
		name := rule.Alert
		if name == "" {
			t.Errorf("deploy/prometheus/alerts.yml: a recording rule (%s): the file holds alerts only", rule.Record)
			continue
		}
		alerts[name] = true
		where := "alert " + name
		expr := rule.Expr.String()
		exprs.WriteString(expr + "\n")
		kept := checkPromQL(t, m, promQL{where, expr})
		if s := rule.Labels["severity"]; !slices.Contains([]string{"page", "warning", "info"}, s) {
			t.Errorf("%s: severity %q, want page, warning or info", where, s)
		}
		for _, key := range []string{"summary", "description", "runbook_url"} {
			if rule.Annotations[key] == "" {
				t.Errorf("%s has no %s annotation", where, key)
			}
		}
		want := "docs/runbooks.md#" + strings.ToLower(name)
		if got := rule.Annotations["runbook_url"]; got != want {
			t.Errorf("%s: runbook_url %q, want %q", where, got, want)
		}
		if !anchors[strings.ToLower(name)] {
			t.Errorf("%s: docs/runbooks.md has no heading #%s", where, strings.ToLower(name))
		}
		for _, part := range []string{"**What it means.**", "**What to check.**", "**What to do.**"} {
			if sec, ok := sections[name]; ok && !strings.Contains(sec, part) {
				t.Errorf("docs/runbooks.md, %s: no %s paragraph", name, part)
			}
		}
		for _, a := range slices.Sorted(maps.Keys(rule.Annotations)) {
			for _, ref := range pqLabelRef.FindAllStringSubmatch(rule.Annotations[a], -1) {
				if !kept[ref[1]] {
					t.Errorf("%s: annotation %s renders $labels.%s, which the expression does not keep", where, a, ref[1])
				}
			}
		}
		if !firing[name] {
			t.Errorf("%s has no case in deploy/prometheus/alerts_test.yml in which it fires", where)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(tested)) {
		if !alerts[name] {
			t.Errorf("deploy/prometheus/alerts_test.yml tests %s, which is no alert of alerts.yml (a misspelt name passes as never firing)", name)
		}
	}
	for _, heading := range slices.Sorted(maps.Keys(sections)) {
		if strings.HasPrefix(heading, "Reservoir") && !alerts[heading] {
			t.Errorf("docs/runbooks.md has a section for %s, which is no alert", heading)
		}
	}
	for _, want := range []string{`up{job="reservoir"} == 0`, `absent(up{job="reservoir"}`, "absent(reservoir_"} {
		if !strings.Contains(exprs.String(), want) {
			t.Errorf("no alert watches the scrape with %s", want)
		}
	}
}

// alertTests reads deploy/prometheus/alerts_test.yml: the alerts with a
// case in which they fire, and every alert it names.
func alertTests(t tb, r *repo) (firing, tested map[string]bool) {
	t.Helper()
	var f struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(r.read(t, filepath.Join(r.root, "deploy", "prometheus", "alerts_test.yml")), &f); err != nil {
		t.Fatalf("deploy/prometheus/alerts_test.yml: %v", err)
	}
	if !slices.Equal(f.RuleFiles, []string{"alerts.yml"}) {
		t.Errorf("deploy/prometheus/alerts_test.yml: rule_files %v, want [alerts.yml]", f.RuleFiles)
	}
	firing, tested = map[string]bool{}, map[string]bool{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			tested[a.Alertname] = true
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			}
		}
	}
	return firing, tested
}

// board is what the checks read of the Grafana board.
type board struct {
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name        string `json:"name"`
			Expr        string `json:"expr"`
			TitleFormat string `json:"titleFormat"`
		} `json:"list"`
	} `json:"annotations"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

var rateWindow = regexp.MustCompile(`\b(rate|irate)\((?:[^()]|\([^()]*\))*\[([^\]]+)\]\)`)

func loadBoard(t tb, r *repo) (*board, []promQL) {
	t.Helper()
	var b board
	if err := json.Unmarshal(r.read(t, filepath.Join(r.root, "deploy", "grafana", "reservoir.json")), &b); err != nil {
		t.Fatalf("deploy/grafana/reservoir.json: %v", err)
	}
	var qs []promQL
	for _, a := range b.Annotations.List {
		qs = append(qs, promQL{"the board's annotation " + a.Name, a.Expr})
	}
	for _, p := range b.Panels {
		for i, tg := range p.Targets {
			qs = append(qs, promQL{fmt.Sprintf("the board's panel %q, query %d", p.Title, i+1), tg.Expr})
		}
	}
	if len(qs) < 40 {
		t.Fatalf("deploy/grafana/reservoir.json: only %d queries found", len(qs))
	}
	return &b, qs
}

// The board selects on the cluster and namespace variables in every
// query, rates over $__rate_interval, groups by the topology's pod, and
// its legends and annotation titles name labels its queries keep.
func TestBoard(t *testing.T) { checkBoard(t, thisRepo) }

func checkBoard(t tb, r *repo) {
	m, err := servedCell()
	if err != nil {
		t.Fatalf("serve a cell to read its metrics: %v", err)
	}
	b, _ := loadBoard(t, r)
	vars := map[string]string{}
	for _, v := range b.Templating.List {
		vars[v.Name] = v.Definition
	}
	for name, label := range map[string]string{"cluster": "cluster", "namespace": "namespace", podLabel: podLabel} {
		if def, ok := vars[name]; !ok {
			t.Errorf("the board has no variable %s", name)
		} else if !strings.HasPrefix(def, "label_values(") || !strings.HasSuffix(def, ", "+label+")") {
			t.Errorf("the board's variable %s is %q, want label_values(..., %s)", name, def, label)
		}
	}
	if _, ok := vars["pod"]; ok {
		t.Errorf("the board has a variable pod: its values would be Kubernetes pods; the topology's pods are %s", podLabel)
	}
	type query struct {
		promQL
		legend string
	}
	var qs []query
	for _, a := range b.Annotations.List {
		qs = append(qs, query{promQL{"the board's annotation " + a.Name, a.Expr}, a.TitleFormat})
	}
	for _, p := range b.Panels {
		for i, tg := range p.Targets {
			qs = append(qs, query{promQL{fmt.Sprintf("the board's panel %q, query %d", p.Title, i+1), tg.Expr}, tg.LegendFormat})
		}
	}
	for _, q := range qs {
		sels, _ := scan(q.expr)
		podSelected := slices.ContainsFunc(sels, func(s promSelector) bool { return s.matchers[podLabel] == `=~"$reservoir_pod"` })
		for _, s := range sels {
			for label, want := range map[string]string{"cluster": `=~"$cluster"`, "namespace": `=~"$namespace"`} {
				if s.matchers[label] != want {
					t.Errorf("%s: %s does not select %s%s", q.where, s.metric, label, want)
				}
			}
			if p, _ := m.perPod(s.metric); p && !podSelected {
				t.Errorf("%s: %s is per pod, but the query does not select %s=~\"$%s\"", q.where, s.metric, podLabel, podLabel)
			}
		}
		for _, w := range rateWindow.FindAllStringSubmatch(q.expr, -1) {
			// An hour or more is a deliberate window (rare events), not a
			// guess at the scrape interval.
			if d, err := model.ParseDuration(w[2]); w[2] != "$__rate_interval" && (err != nil || time.Duration(d) < time.Hour) {
				t.Errorf("%s: %s over [%s]: use [$__rate_interval], which stays above the scrape interval at every zoom", q.where, w[1], w[2])
			}
		}
		kept := checkPromQL(t, m, q.promQL)
		for _, ref := range pqTemplate.FindAllStringSubmatch(q.legend, -1) {
			if !kept[ref[1]] {
				t.Errorf("%s: its legend names {{%s}}, which its query does not keep (it would print nothing)", q.where, ref[1])
			}
		}
	}
}

// promtool is Prometheus's own checker: on PATH (scripts/test installs it
// with scripts/promtool), or what scripts/promtool prints.
func promtool(t *testing.T) string {
	t.Helper()
	testtier.Needs(t, "promtool (scripts/promtool: Debian's prometheus package)")
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	cmd := exec.Command(filepath.Join(thisRepo.root, "scripts", "promtool"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("no promtool: scripts/promtool failed (%v): %s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// Every query of the board parses as PromQL, by Prometheus's own parser
// (promtool check rules on the queries as recording rules), with the
// board's variables as Grafana fills them.
func TestBoardQueriesParse(t *testing.T) {
	bin := promtool(t)
	_, qs := loadBoard(t, thisRepo)
	fill := strings.NewReplacer("$__rate_interval", "1m", `"$cluster"`, `".*"`, `"$namespace"`, `"shop"`, `"$reservoir_pod"`, `"pod-a|pod-b"`)
	var f strings.Builder
	f.WriteString("groups:\n  - name: board\n    rules:\n")
	for i, q := range qs {
		e := fill.Replace(q.expr)
		if strings.Contains(e, "$") {
			t.Errorf("%s: a variable the test does not fill: %s", q.where, e)
		}
		fmt.Fprintf(&f, "      - record: board:query_%d\n        expr: %q\n", i, e)
	}
	file := filepath.Join(t.TempDir(), "board_rules.yml")
	if err := os.WriteFile(file, []byte(f.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules on the board's %d queries: %v\n%s", len(qs), err, out)
	}
}

// The ServiceMonitor decodes strictly as the Prometheus Operator's type,
// and scrapes /metrics on the admin listener: its selector matches the
// admin Service, whose port of that name targets the container's admin
// port (the --admin-addr the Deployment passes: TestDeployment), and no
// other Service's; the job label it sets is the one the alerts select.
func TestServiceMonitor(t *testing.T) { checkServiceMonitor(t, thisRepo) }

func checkServiceMonitor(t tb, r *repo) {
	s := loadServed(t, r)
	const file = "servicemonitor.yaml"
	b := r.read(t, filepath.Join(r.root, "deploy", "kubernetes", "components", "servicemonitor", file))
	var sm monitoringv1.ServiceMonitor
	if err := k8syaml.UnmarshalStrict(b, &sm); err != nil {
		t.Fatalf("deploy/kubernetes/components/servicemonitor/%s as a monitoring.coreos.com/v1 ServiceMonitor: %v", file, err)
	}
	if sm.APIVersion != "monitoring.coreos.com/v1" || sm.Kind != "ServiceMonitor" {
		t.Errorf("%s: %s %s, want monitoring.coreos.com/v1 ServiceMonitor", file, sm.APIVersion, sm.Kind)
	}
	sel := sm.Spec.Selector
	if len(sel.MatchExpressions) > 0 || len(sel.MatchLabels) == 0 {
		t.Fatalf("%s: selector %v: want matchLabels alone", file, sel)
	}
	if !sm.Spec.NamespaceSelector.Any && len(sm.Spec.NamespaceSelector.MatchNames) > 0 {
		t.Errorf("%s: namespaceSelector %v: leave it empty (the ServiceMonitor's own namespace, where reservoir runs)", file, sm.Spec.NamespaceSelector)
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("%s: %d endpoints, want 1 (/metrics on the admin port)", file, len(sm.Spec.Endpoints))
	}
	ep := sm.Spec.Endpoints[0]
	if ep.Path != "/metrics" {
		t.Errorf("%s: path %q, want /metrics", file, ep.Path)
	}
	if ep.Scheme != nil && !strings.EqualFold(string(*ep.Scheme), "http") {
		t.Errorf("%s: scheme %s: the admin listener serves plain HTTP", file, *ep.Scheme)
	}
	if ep.HonorLabels {
		t.Errorf("%s: honorLabels: true lets reservoir's labels replace the scrape's target labels; reservoir's collide with none (%s)", file, podLabel)
	}
	if ep.Port == "" {
		t.Errorf("%s: the endpoint names no Service port", file)
	}
	var targets []string
	var jobs []string
	for _, o := range s.m.all("Service") {
		if !subset(sel.MatchLabels, o.Metadata.Labels) {
			continue
		}
		var spec serviceSpec
		if err := o.Spec.Decode(&spec); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		for _, p := range spec.Ports {
			if p.Name != ep.Port {
				continue
			}
			targets = append(targets, o.Metadata.Name)
			if got := s.resolvePort(p.TargetPort); got != s.ports["admin"] || got == 0 {
				t.Errorf("%s: %s's port %s targets container port %d, not the admin listener's (%d), which serves /metrics", file, o, p.Name, got, s.ports["admin"])
			}
			if spec.PublishNotReadyAddresses == nil || !*spec.PublishNotReadyAddresses {
				t.Errorf("%s scrapes %s, which drops unready replicas: their metrics vanish in the incidents they matter", file, o)
			}
		}
		job := o.Metadata.Name // the Operator's job without a jobLabel
		if sm.Spec.JobLabel != "" {
			job = o.Metadata.Labels[sm.Spec.JobLabel]
		}
		if slices.Contains(targets, o.Metadata.Name) {
			jobs = append(jobs, job)
		}
	}
	switch {
	case len(targets) == 0:
		t.Errorf("%s: no Service it selects (%v) has a port named %q", file, sel.MatchLabels, ep.Port)
	case len(targets) > 1:
		t.Errorf("%s scrapes %v: every replica would be scraped %d times", file, targets, len(targets))
	}
	// The scrape alerts select the job by name.
	alerts := string(r.read(t, filepath.Join(r.root, "deploy", "prometheus", "alerts.yml")))
	want := regexp.MustCompile(`up\{job="([^"]+)"\}`).FindStringSubmatch(alerts)
	if want == nil {
		t.Fatalf("deploy/prometheus/alerts.yml has no up{job=...} alert")
	}
	for _, job := range jobs {
		if job != want[1] {
			t.Errorf("%s: the job label is %q (jobLabel %q), but the alerts select job=%q", file, job, sm.Spec.JobLabel, want[1])
		}
	}
}

// The checks above fail on the breakage they are for.
func TestObservabilityChecksCatchBreakage(t *testing.T) {
	const (
		sm     = "deploy/kubernetes/components/servicemonitor/servicemonitor.yaml"
		alerts = "deploy/prometheus/alerts.yml"
		tests  = "deploy/prometheus/alerts_test.yml"
		rb     = "docs/runbooks.md"
		gb     = "deploy/grafana/reservoir.json"
	)
	cases := []struct {
		name, file, old, new string
		check                func(tb, *repo)
		want                 string
	}{
		{"scrape the checkout port", sm, "- port: admin", "- port: checkout", checkServiceMonitor, "targets container port 8080, not the admin listener's (8081)"},
		{"a port no Service has", sm, "- port: admin", "- port: metrics", checkServiceMonitor, `has a port named "metrics"`},
		{"a misspelt field", sm, "path: /metrics", "pth: /metrics", checkServiceMonitor, `unknown field "pth"`},
		{"selects nothing", sm, "      app.kubernetes.io/component: server\n  endpoints", "      app.kubernetes.io/component: worker\n  endpoints", checkServiceMonitor, "no Service it selects"},
		{"honor_labels", sm, "      path: /metrics\n", "      path: /metrics\n      honorLabels: true\n", checkServiceMonitor, "honorLabels: true"},
		{"the job label lost", sm, "  jobLabel: app.kubernetes.io/name\n", "", checkServiceMonitor, "but the alerts select job=\"reservoir\""},
		{"grouped by the Kubernetes pod", alerts, "max by (namespace, reservoir_pod) (reservoir_mirror_lag_seconds)", "max by (namespace, pod) (reservoir_mirror_lag_seconds)",
			checkAlertRules, "names the label pod: that is the Kubernetes pod"},
		{"pods added together", alerts, "max by (namespace, reservoir_pod) (reservoir_mirror_lag_seconds)", "max by (namespace) (reservoir_mirror_lag_seconds)",
			checkAlertRules, "max by (namespace) over reservoir_mirror_lag_seconds, which carry reservoir_pod, adds the pods together"},
		{"a label no metric has", alerts, "sum by (namespace, reservoir_pod, caller) (rate(reservoir_mysql_tx_retries_total", "sum by (namespace, reservoir_pod, callr) (rate(reservoir_mysql_tx_retries_total",
			checkAlertRules, "names the label callr, which none of the metrics it reads"},
		{"a summary with the Kubernetes pod", alerts, `summary: "Pod {{ $labels.reservoir_pod }}: no replica runs the relay"`, `summary: "Pod {{ $labels.pod }}: no replica runs the relay"`,
			checkAlertRules, "renders $labels.pod, which the expression does not keep"},
		{"a runbook link astray", alerts, "runbook_url: docs/runbooks.md#reservoirrelaynotrunning", "runbook_url: docs/runbooks.md#relay",
			checkAlertRules, `runbook_url "docs/runbooks.md#relay", want`},
		{"a misspelt rule field", alerts, "        for: 2m\n", "        fore: 2m\n", checkAlertRules, `unknown field "fore"`},
		{"an alert without a test", tests, "alertname: ReservoirRelayNotRunning\n        exp_alerts:\n          -", "alertname: ReservoirRelayNotRunnin\n        exp_alerts:\n          -",
			checkAlertRules, "alert ReservoirRelayNotRunning has no case"},
		{"a runbook without what to do", rb, "**What to do.** Fix what stops the relay", "Fix what stops the relay", checkAlertRules, "ReservoirRelayLagHigh: no **What to do.** paragraph"},
		{"a runbook missing", rb, "### ReservoirRelayNotRunning\n", "### Relay not running\n", checkAlertRules, "docs/runbooks.md has no heading #reservoirrelaynotrunning"},
		{"a fixed window", gb, `reservoir_handoffs_total{cluster=~\"$cluster\", namespace=~\"$namespace\", reservoir_pod=~\"$reservoir_pod\"}[$__rate_interval]`,
			`reservoir_handoffs_total{cluster=~\"$cluster\", namespace=~\"$namespace\", reservoir_pod=~\"$reservoir_pod\"}[1m]`, checkBoard, "rate over [1m]: use [$__rate_interval]"},
		{"no namespace selector", gb, `reservoir_handoffs_total{cluster=~\"$cluster\", namespace=~\"$namespace\", `, `reservoir_handoffs_total{cluster=~\"$cluster\", `,
			checkBoard, `reservoir_handoffs_total does not select namespace=~"$namespace"`},
		{"a legend of the Kubernetes pod", gb, `"legendFormat": "{{reservoir_pod}} to {{to}}: {{result}}"`, `"legendFormat": "{{pod}} to {{to}}: {{result}}"`,
			checkBoard, "its legend names {{pod}}"},
		{"the pod variable of Kubernetes", gb, `"name": "reservoir_pod"`, `"name": "pod"`, checkBoard, "the board has a variable pod"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(thisRepo.root, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(c.old)) {
				t.Fatalf("%s no longer contains %q: update this case", c.file, c.old)
			}
			r := &repo{root: thisRepo.root, edit: map[string][]byte{c.file: bytes.Replace(b, []byte(c.old), []byte(c.new), 1)}}
			expectFailure(t, c.file, c.old, c.new, c.want, func(rec tb) { c.check(rec, r) })
		})
	}
	t.Run("a metric labelled pod", func(t *testing.T) {
		m := servedOrFail(t)
		broken := &servedMetrics{labels: maps.Clone(m.labels)}
		broken.labels["reservoir_mirror_lag_seconds"] = map[string]bool{"pod": true}
		expectFailure(t, "the served metrics", podLabel, "pod", `reservoir_mirror_lag_seconds has the label "pod", which a Kubernetes scrape sets`,
			func(rec tb) { checkMetricLabels(rec, broken) })
	})
}

func expectFailure(t *testing.T, what, old, new, want string, check func(tb)) {
	t.Helper()
	rec := &recorder{t: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(rec)
	}()
	<-done
	if len(rec.errors) == 0 {
		t.Fatalf("the check passed with %s broken (%q -> %q)", what, old, new)
	}
	t.Logf("with %s broken:\n%s", what, strings.Join(rec.errors, "\n"))
	if !slices.ContainsFunc(rec.errors, func(e string) bool { return strings.Contains(e, want) }) {
		t.Errorf("the check failed, but none of its errors says %q:\n%s", want, strings.Join(rec.errors, "\n"))
	}
}
