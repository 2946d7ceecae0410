package soak

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testbuf"
	"github.com/seed31b0e981/reservoir/internal/testtier"
)

// binary is the reservoir binary TestMain builds once ("" under -short:
// see reservoirBinary).
var binary string

// reservoirBinary is the binary TestMain built. Under -short none is
// built (every test here needs servers too), and the test skips.
func reservoirBinary(t *testing.T) string {
	t.Helper()
	testtier.Needs(t, "the reservoir binary (built by TestMain)")
	return binary
}

func TestMain(m *testing.M) {
	if os.Getenv(envFloodBase) != "" {
		os.Exit(m.Run()) // the flood test's attackers: they need no binary
	}
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // the fast tier builds nothing
	}
	dir, err := os.MkdirTemp("", "reservoir-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "reservoir")
	cmd := exec.Command("go", "build", "-o", binary, "github.com/seed31b0e981/reservoir/cmd/reservoir")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "soak: go build ./cmd/reservoir: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// lockedBuffer is a goroutine-safe buffer a process writes its log to.
type lockedBuffer = testbuf.Buffer

// proc is one `reservoir serve` OS process.
type proc struct {
	name    string
	topo    string
	base    string // the checkout API
	admin   string // the admin listener: admin API, /metrics, /readyz
	started time.Time
	cmd     *exec.Cmd
	stderr  *lockedBuffer
	done    chan struct{}
	err     error // set before done is closed
}

var (
	listening = regexp.MustCompile(`listening on (http://[0-9.:]+)`)
	adminOn   = regexp.MustCompile(`admin on (http://[0-9.:]+)`)
)

// apiToken is the soak's checkout API client token; every replica gets
// the client in $RESERVOIR_CLIENTS (the clients file's content, as a
// Kubernetes Secret would pass it).
const apiToken = "soak-client-token-0123456789abcdef"

// clientsEntry is the clients file that accepts apiToken.
var clientsEntry = fmt.Sprintf("[[clients]]\nname = \"soak\"\ntoken_sha256 = \"%x\"\nroles = [\"checkout\", \"inventory\"]\n", sha256.Sum256([]byte(apiToken)))

// startServe starts `reservoir serve` on a free port with the admin token in
// its environment and waits until it listens.
func startServe(t *testing.T, name, topo, token string) *proc {
	t.Helper()
	return startServeIn(t, name, "", topo, token)
}

// startServeIn is startServe with dir as the process's working directory.
func startServeIn(t *testing.T, name, dir, topo, token string) *proc {
	t.Helper()
	cmd := exec.Command(reservoirBinary(t), "serve", "--topology", topo, "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--log-level", "warn", "--shutdown-timeout", "10s", "--drain-timeout", "10s")
	cmd.Env = append(os.Environ(), "RESERVOIR_ADMIN_TOKEN="+token, "RESERVOIR_CLIENTS="+clientsEntry)
	cmd.Dir = dir
	p := &proc{name: name, topo: topo, started: time.Now(), cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			m, a := listening.FindStringSubmatch(sc.Text()), adminOn.FindStringSubmatch(sc.Text())
			if m != nil && a != nil && !sent {
				found <- [2]string{m[1], a[1]}
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case f := <-found:
		p.base, p.admin = f[0], f[1]
	case <-p.done:
		t.Fatalf("%s exited before listening: %v\n%s", name, p.err, p.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not listen within 60s:\n%s", name, p.stderr.String())
	}
	return p
}

// stop sends SIGTERM and waits for the exit status.
func (p *proc) stop(within time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	select {
	case <-p.done:
		return time.Since(start), p.err
	case <-time.After(within):
		return time.Since(start), fmt.Errorf("%s did not exit within %s of SIGTERM", p.name, within)
	}
}

// crash kills the process with SIGKILL (no shutdown at all: requests in
// flight are cut, the relay lease is dropped with its connection) and
// waits for it to be gone.
func (p *proc) crash(within time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(within):
		return fmt.Errorf("%s still running %s after SIGKILL", p.name, within)
	}
}

// sample is one Prometheus sample: a metric name and its labels.
type sample struct {
	name   string
	labels map[string]string
}

// metrics is a scrape of one process's /metrics: the reservoir_ samples
// (histogram buckets left out) and the process's resources.
type metrics struct {
	goroutines, rss float64
	samples         map[string]float64 // by the sample's text, name{labels}
}

var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

func parseSample(key string) sample {
	name, rest, _ := strings.Cut(key, "{")
	s := sample{name: name, labels: map[string]string{}}
	for _, m := range labelPair.FindAllStringSubmatch(rest, -1) {
		s.labels[m[1]] = m[2]
	}
	return s
}

// sum adds the samples of a metric whose labels match every pair of where,
// grouped by the value of the label by ("" for one total).
func (m metrics) sum(name string, by string, where map[string]string) map[string]float64 {
	out := map[string]float64{}
	for key, v := range m.samples {
		s := parseSample(key)
		if s.name != name {
			continue
		}
		match := true
		for k, want := range where {
			if s.labels[k] != want {
				match = false
			}
		}
		if match {
			out[s.labels[by]] += v
		}
	}
	return out
}

// add adds o's samples to m's (counters of several processes).
func (m *metrics) add(o metrics) {
	if m.samples == nil {
		m.samples = map[string]float64{}
	}
	for k, v := range o.samples {
		m.samples[k] += v
	}
}

func scrape(client *http.Client, base string) (metrics, error) {
	res, err := client.Get(base + "/metrics")
	if err != nil {
		return metrics{}, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return metrics{}, fmt.Errorf("/metrics: %d", res.StatusCode)
	}
	m := metrics{samples: map[string]float64{}}
	var seen int
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "reservoir_") {
			key, v, _ := strings.Cut(line, " ")
			if strings.Contains(key, "_bucket{") {
				continue
			}
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				m.samples[key] = f
			}
			continue
		}
		for name, dst := range map[string]*float64{"go_goroutines": &m.goroutines, "process_resident_memory_bytes": &m.rss} {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return m, fmt.Errorf("/metrics %s: %w", name, err)
				}
				*dst = f
				seen++
			}
		}
	}
	if seen != 2 {
		return m, fmt.Errorf("/metrics: go_goroutines or process_resident_memory_bytes missing")
	}
	return m, sc.Err()
}

// decisionView is a decision as /admin/rollout/status shows it.
type decisionView struct {
	Mode      string `json:"mode"`
	Kill      string `json:"kill"`
	Authority string `json:"authority"`
	Error     string `json:"error"`
}

func (d decisionView) String() string { return d.Mode + "/" + d.Kill + "/" + d.Authority }

// rolloutStatus is the part of /admin/rollout/status the soak reads.
type rolloutStatus struct {
	FlagsLoaded bool `json:"flags_loaded"`
	Pods        []struct {
		Pod       string       `json:"pod"`
		Effective decisionView `json:"effective"`
		RelayLag  struct {
			Changes  int64   `json:"changes"`
			OldestMs float64 `json:"oldest_ms"`
			Error    string  `json:"error"`
		} `json:"relay_lag"`
	} `json:"pods"`
	Shops []struct {
		Shop      int64        `json:"shop"`
		Effective decisionView `json:"effective"`
	} `json:"shops"`
}

// effective is what a replica applies, by scope ("pod:<name>",
// "shop:<id>"), as "mode/kill/authority".
func (st rolloutStatus) effective() map[string]string {
	out := map[string]string{}
	for _, p := range st.Pods {
		out["pod:"+p.Pod] = p.Effective.String()
	}
	for _, s := range st.Shops {
		out[fmt.Sprintf("shop:%d", s.Shop)] = s.Effective.String()
	}
	return out
}

// adminCall sends an admin API call with the token and decodes a 2xx
// answer into out (when not nil). It returns the status and the body.
func adminCall(ctx context.Context, client *http.Client, base, method, path, token string, body, out any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Reservoir-Actor", "soak")
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return res.StatusCode, nil, err
	}
	if res.StatusCode/100 == 2 && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return res.StatusCode, b, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return res.StatusCode, b, nil
}

// status reads a replica's /admin/rollout/status.
func status(ctx context.Context, client *http.Client, base, token string) (rolloutStatus, error) {
	var st rolloutStatus
	code, body, err := adminCall(ctx, client, base, "GET", "/admin/rollout/status", token, nil, &st)
	if err == nil && code != 200 {
		err = fmt.Errorf("/admin/rollout/status: %d %s", code, body)
	}
	return st, err
}

// readiness is the part of /readyz the soak reads.
type readiness struct {
	Ready       bool     `json:"ready"`
	NotReady    []string `json:"not_ready"`
	Degraded    []string `json:"degraded"`
	FlagsLoaded bool     `json:"flags_loaded"`
	Stores      []struct {
		Pod   string `json:"pod"`
		MySQL string `json:"mysql"`
		Redis string `json:"redis"`
	} `json:"stores"`
}

// store is the state /readyz gives a pod's store ("mysql" or "redis").
func (r readiness) store(pod, which string) string {
	for _, s := range r.Stores {
		if s.Pod == pod {
			if which == "redis" {
				return s.Redis
			}
			return s.MySQL
		}
	}
	return ""
}

// ready reads a replica's /readyz (without the token: as a probe does).
func ready(ctx context.Context, client *http.Client, base string) (int, readiness, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/readyz", nil)
	if err != nil {
		return 0, readiness{}, err
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, readiness{}, err
	}
	defer res.Body.Close()
	var r readiness
	if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
		return res.StatusCode, r, fmt.Errorf("/readyz: %w", err)
	}
	return res.StatusCode, r, nil
}

// waitFor polls cond every 10ms until it holds (nil) or within passes
// (then the last error cond gave).
func waitFor(within time.Duration, cond func() error) (time.Duration, error) {
	return poll(within, 10*time.Millisecond, cond)
}

// sortedJoin formats counts as "k n, k n" in key order, zeros left out.
func sortedJoin(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] != 0 {
			name := k
			if name == "" {
				name = "total"
			}
			parts = append(parts, fmt.Sprintf("%s %.0f", name, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
