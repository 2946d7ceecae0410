package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// The flood: floodConns connections keep sending slow bodies to the
// checkout listener of one `reservoir serve` process for floodFor, each
// declaring a body just under the cap and trickling it; a connection the
// server answers or cuts is replaced after a moment. The attackers are a
// process of their own (TestHelperFloodProcess). Meanwhile an operator flips
// the kill switch on the admin listener over and over.
const (
	floodConns = 1100
	floodFor   = 12 * time.Second
	floodBody  = 255 << 10 // bytes declared per request (the cap is 256 KiB)
)

// TestFloodLeavesTheKillSwitchReachable proves that a slow-body flood of
// the checkout listener never reaches the admin listener: throughout the
// flood the kill switch answers with p99 under 1 s, the process stays
// under 200 MB of RSS, and once the flood ends checkout calls succeed
// again within 2 s. The flood fills the checkout listener: every one of
// its places is taken (the connections beyond wait in the kernel's accept
// queue), or, without a cap, its body budget is spent (503).
func TestFloodLeavesTheKillSwitchReachable(t *testing.T) {
	dir := t.TempDir()
	control, db, rd := testdb.New(t), testdb.New(t), testredis.New(t)
	flags := flagdoc.FlagsFile{Path: filepath.Join(dir, "flags.json")}
	if err := flags.Write(flagdoc.NewFlags()); err != nil {
		t.Fatal(err)
	}
	topo := filepath.Join(dir, "topology.toml")
	if err := os.WriteFile(topo, []byte(fmt.Sprintf("control_dsn = %q\nflags_file = %q\n[[pods]]\nname = \"pod-a\"\nmysql_dsn = %q\nredis_addr = %q\nredis_prefix = %q\nshops = [1001]\n",
		control.DSN, flags.Path, db.DSN, testredis.Addr(t), rd.Prefix)), 0o600); err != nil {
		t.Fatal(err)
	}
	const adminToken = "flood-admin-token-0123456789"
	p := startServe(t, "serve-flood", topo, adminToken)
	ctx := context.Background()
	client := &http.Client{Timeout: 30 * time.Second}
	if code, r, err := ready(ctx, client, p.admin); err != nil || code != 200 {
		t.Fatalf("not ready before the flood: %d %+v %v", code, r, err)
	}
	cart := func(tok string) map[string]any {
		return map[string]any{"token": tok, "ttl_ms": 60000, "lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}}}
	}
	if code, body, err := adminCall(ctx, client, p.base, "POST", "/v1/shops/1001/items/7/locations/1/adjust", apiToken, map[string]any{"available": 1000}, nil); err != nil || code != 200 {
		t.Fatalf("adjust: %d %s %v", code, body, err)
	}
	if code, body, err := adminCall(ctx, client, p.base, "POST", "/v1/shops/1001/reservations", apiToken, cart("before"), nil); err != nil || code != 201 {
		t.Fatalf("reserve before the flood: %d %s %v", code, body, err)
	}
	pid := p.cmd.Process.Pid
	baseRSS := rssMiB(t, pid)

	// The flood: the attackers run in a process of their own (this test
	// binary again, TestHelperFloodProcess), on one core, as they would on
	// machines of their own. In this process, with GOMAXPROCS 1, the
	// operator's calls queued behind 1,100 attacking goroutines in the
	// Go scheduler: the kill switch, answered by the server in about
	// 20 ms, took over a second to reach the operator under CI's load.
	flood := startFlood(t, p.base)
	// The operator, and the process's memory, during the flood.
	var (
		lat              []time.Duration
		maxRSS           float64
		maxConns, places float64 // the checkout listener's connections open, at most, and its places
		placeWaits       float64 // how often a connection waited for a place
	)
	sampler, stopSampling := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampler)
		for i := 0; ; i++ {
			maxRSS = max(maxRSS, rssMiB(t, pid))
			if i%10 == 0 { // twice a second
				if m, err := scrape(client, p.admin); err == nil {
					maxConns, places = max(maxConns, m.samples["reservoir_checkout_connections"]), m.samples["reservoir_checkout_connection_places"]
					placeWaits = max(placeWaits, m.samples["reservoir_checkout_connection_waits_total"])
				}
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	deadline := time.Now().Add(floodFor)
	time.Sleep(time.Second) // let the flood fill the listener first
	for i := 0; time.Now().Before(deadline); i++ {
		method := "POST"
		if i%2 == 1 {
			method = "DELETE"
		}
		start := time.Now()
		code, body, err := adminCall(ctx, client, p.admin, method, "/admin/killswitch", adminToken,
			map[string]any{"scope": "pod:pod-a", "reason": "flood drill " + strconv.Itoa(i)}, nil)
		lat = append(lat, time.Since(start))
		if err != nil || code != 200 {
			t.Errorf("kill switch %s #%d during the flood: %d %s %v", method, i, code, body, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The flood ends: every connection is closed.
	fs := flood.stop(t)
	ended := time.Now()
	close(stopSampling)
	<-sampler
	// Checkout serves again.
	var recovered time.Duration
	for i := 0; ; i++ {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		code, _, err := adminCall(rctx, client, p.base, "POST", "/v1/shops/1001/reservations", apiToken, cart("after-"+strconv.Itoa(i)), nil)
		cancel()
		if err == nil && code == 201 {
			recovered = time.Since(ended)
			break
		}
		if time.Since(ended) > 10*time.Second {
			t.Fatalf("checkout did not recover within 10 s of the flood's end: last %d %v", code, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	slices.Sort(lat)
	p99 := lat[min(len(lat)-1, len(lat)*99/100)]
	t.Logf("flood: %d connections for %s: %d requests opened, %d answered (%v), %d cut by the server",
		floodConns, floodFor, fs.Opened, fs.Answered, fs.Statuses, fs.Cuts)
	t.Logf("checkout listener: at most %.0f connections open of %.0f places; a connection waited for a place %.0f times", maxConns, places, placeWaits)
	if fs.Statuses[http.StatusServiceUnavailable] == 0 && (places == 0 || maxConns < places && placeWaits == 0) {
		t.Errorf("the flood never filled the checkout listener (no 503 from its body budget, and its places, %.0f, were never all taken: %.0f at most, no wait for one): it tested nothing", places, maxConns)
	}
	t.Logf("kill switch during the flood: %d calls, p50 %s, p99 %s, max %s", len(lat),
		lat[len(lat)/2].Round(time.Millisecond), p99.Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	t.Logf("serve RSS: %.0f MiB before, %.0f MiB at most during the flood; checkout recovered %s after the flood", baseRSS, maxRSS, recovered.Round(time.Millisecond))
	if len(lat) < 20 {
		t.Errorf("only %d kill switch calls in %s", len(lat), floodFor)
	}
	if p99 >= time.Second {
		t.Errorf("kill switch p99 %s during the flood, want under 1 s", p99)
	}
	if maxRSS >= 200 {
		t.Errorf("serve reached %.0f MiB of RSS during the flood, want under 200", maxRSS)
	}
	if recovered > 2*time.Second {
		t.Errorf("checkout recovered %s after the flood, want within 2 s", recovered)
	}
}

// envFloodBase gives the attackers' process (TestHelperFloodProcess) the
// checkout listener to flood; floodStatsPrefix starts the line on which
// it reports what it saw.
const (
	envFloodBase     = "RESERVOIR_SOAK_FLOOD_BASE"
	floodStatsPrefix = "flood stats: "
)

// floodStats is what the attackers saw: requests opened, answered (by
// status) and cut by the server without an answer.
type floodStats struct {
	Opened, Answered, Cuts int64
	Statuses               map[int]int
}

// floodProc is the attackers' process: it floods until its standard
// input is closed.
type floodProc struct {
	cmd   *exec.Cmd
	stdin io.Closer
	out   lockedBuffer
	done  bool
}

// startFlood starts the attackers' process against the checkout listener
// base, with one core (GOMAXPROCS 1).
func startFlood(t *testing.T, base string) *floodProc {
	t.Helper()
	f := &floodProc{cmd: exec.Command(os.Args[0], "-test.run=^TestHelperFloodProcess$", "-test.v")}
	f.cmd.Env = append(os.Environ(), envFloodBase+"="+base, "GOMAXPROCS=1")
	f.cmd.Stdout, f.cmd.Stderr = &f.out, &f.out
	stdin, err := f.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	f.stdin = stdin
	if err := f.cmd.Start(); err != nil {
		t.Fatalf("start the attackers' process: %v", err)
	}
	t.Cleanup(func() {
		if !f.done {
			f.stdin.Close()
			f.cmd.Wait()
		}
	})
	return f
}

// stop ends the flood (every attacking connection closed when it
// returns) and reads what the attackers saw.
func (f *floodProc) stop(t *testing.T) floodStats {
	t.Helper()
	f.stdin.Close()
	err := f.cmd.Wait()
	f.done = true
	if err != nil {
		t.Fatalf("the attackers' process: %v\n%s", err, f.out.String())
	}
	for _, line := range strings.Split(f.out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, floodStatsPrefix); ok {
			var fs floodStats
			if err := json.Unmarshal([]byte(rest), &fs); err != nil {
				t.Fatalf("the attackers' report %q: %v", rest, err)
			}
			return fs
		}
	}
	t.Fatalf("the attackers' process reported nothing:\n%s", f.out.String())
	return floodStats{}
}

// TestHelperFloodProcess is not a test: it is the attackers' process of
// TestFloodLeavesTheKillSwitchReachable, which runs this binary again
// with envFloodBase set. It keeps floodConns slow-body connections open
// against that listener until its standard input closes, then prints
// what it saw. Run without envFloodBase, it skips.
func TestHelperFloodProcess(t *testing.T) {
	base := os.Getenv(envFloodBase)
	if base == "" {
		t.Skip("the attackers' process of TestFloodLeavesTheKillSwitchReachable; only that test runs it")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		io.Copy(io.Discard, os.Stdin) // the parent closes it, or dies
		cancel()
	}()
	var (
		wg                     sync.WaitGroup
		opened, answered, cuts atomic.Int64
		mu                     sync.Mutex
		statuses               = map[int]int{}
	)
	for range floodConns {
		wg.Go(func() {
			for ctx.Err() == nil {
				opened.Add(1)
				status := slowBody(ctx, base)
				switch {
				case status > 0:
					answered.Add(1)
					mu.Lock()
					statuses[status]++
					mu.Unlock()
				case ctx.Err() == nil:
					cuts.Add(1)
				}
				// An attacker refused at once (503: the body budget is
				// spent) comes back after a moment. Reconnecting in a
				// tight loop would only measure this process's own CPU,
				// which shares the machine's two cores with the server:
				// the server's cost of a refusal is a header read and a
				// small answer either way.
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	b, err := json.Marshal(floodStats{Opened: opened.Load(), Answered: answered.Load(), Cuts: cuts.Load(), Statuses: statuses})
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s%s\n", floodStatsPrefix, b)
}

// slowBody opens a connection to base, sends an authenticated reserve
// declaring floodBody bytes of body, and trickles it (1 KiB every 100 ms)
// until the server answers or cuts, or ctx ends. It returns the answer's
// status, or 0 if there was none.
func slowBody(ctx context.Context, base string) int {
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		time.Sleep(10 * time.Millisecond)
		return 0
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if _, err := fmt.Fprintf(conn, "POST /v1/shops/1001/reservations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"token\":\"",
		apiToken, floodBody); err != nil {
		return 0
	}
	answer := make(chan int, 1)
	go func() {
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answer <- 0
			return
		}
		res.Body.Close()
		answer <- res.StatusCode
	}()
	chunk := []byte(strings.Repeat("a", 1024))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case s := <-answer:
			return s
		case <-tick.C:
			if _, err := conn.Write(chunk); err != nil {
				return <-answer
			}
		}
	}
}

// rssMiB reads a process's resident set size.
func rssMiB(t *testing.T, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Errorf("read the process's status: %v", err)
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
