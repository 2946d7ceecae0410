package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testbuf"
)

// binary is the reservoir binary TestMain builds once.
var binary string

func TestMain(m *testing.M) {
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
	name   string
	base   string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{}
	err    error // set before done is closed
}

var listening = regexp.MustCompile(`listening on (http://[0-9.:]+)`)

// startServe starts `reservoir serve` on a free port with the admin token in
// its environment and waits until it listens.
func startServe(t *testing.T, name, topo, token string) *proc {
	t.Helper()
	cmd := exec.Command(binary, "serve", "--topology", topo, "--addr", "127.0.0.1:0",
		"--log-level", "warn", "--shutdown-timeout", "10s", "--drain-timeout", "10s")
	cmd.Env = append(os.Environ(), "RESERVOIR_ADMIN_TOKEN="+token)
	p := &proc{name: name, cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m[1]
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
	case p.base = <-found:
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

// resources is what a process's /metrics says about it.
type resources struct {
	goroutines float64
	rss        float64
	// counters are the nonzero samples of the failure-window counters
	// (see counterPrefixes), by sample name with labels.
	counters map[string]float64
}

// counterPrefixes name the counters the summary reports: the windows
// where the two stores may disagree, and what repaired them.
var counterPrefixes = []string{
	"reservoir_redis_legacy_claim_failures_total",
	"reservoir_redis_reap_settled_total",
	"reservoir_redis_follow_settled_total",
	"reservoir_dualwrite_shadow_",
}

func scrape(client *http.Client, base string) (resources, error) {
	res, err := client.Get(base + "/metrics")
	if err != nil {
		return resources{}, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return resources{}, fmt.Errorf("/metrics: %d", res.StatusCode)
	}
	r := resources{counters: map[string]float64{}}
	var seen int
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, prefix := range counterPrefixes {
			if strings.HasPrefix(line, prefix) {
				name, v, _ := strings.Cut(line, " ")
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f != 0 {
					r.counters[name] = f
				}
			}
		}
		for name, dst := range map[string]*float64{"go_goroutines": &r.goroutines, "process_resident_memory_bytes": &r.rss} {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return r, fmt.Errorf("/metrics %s: %w", name, err)
				}
				*dst = f
				seen++
			}
		}
	}
	if seen != 2 {
		return r, fmt.Errorf("/metrics: go_goroutines or process_resident_memory_bytes missing")
	}
	return r, sc.Err()
}

// effective reads what a replica's /admin/rollout/status says a pod gets,
// as "mode/kill/authority".
func effective(ctx context.Context, client *http.Client, base, token, pod string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/admin/rollout/status", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var st struct {
		Pods []struct {
			Pod       string `json:"pod"`
			Effective struct {
				Mode      string `json:"mode"`
				Kill      string `json:"kill"`
				Authority string `json:"authority"`
			} `json:"effective"`
		} `json:"pods"`
	}
	if res.StatusCode != 200 {
		return "", fmt.Errorf("status: %d", res.StatusCode)
	}
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		return "", err
	}
	for _, p := range st.Pods {
		if p.Pod == pod {
			e := p.Effective
			return e.Mode + "/" + e.Kill + "/" + e.Authority, nil
		}
	}
	return "", fmt.Errorf("no pod %s in the status", pod)
}
