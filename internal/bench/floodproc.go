package bench

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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The killflood scenario's attackers run in a process of their own: the
// bench's binary again (`reservoir bench` with FloodEnv set), with one core
// (GOMAXPROCS 1), as they would on machines of their own. In the measuring
// process their 1,500 goroutines would share the Go scheduler with the
// operator's admin calls, and the measurement would be of the bench, not
// of the replicas (internal/soak/flood_test.go found the same).

// FloodEnv, when set in the environment of `reservoir bench`, makes the
// process the attackers of a killflood point instead of a bench: its value
// is a FloodSpec in JSON. The attackers run until their standard input
// closes, then print FloodStatsPrefix and their FloodStats in JSON on one
// line of standard output.
const (
	FloodEnv         = "RESERVOIR_BENCH_FLOOD"
	FloodStatsPrefix = "flood stats: "
)

// FloodSpec is what the attackers' process floods.
type FloodSpec struct {
	// Bases are the checkout listeners (http://host:port); connection i
	// goes to Bases[i % len(Bases)].
	Bases []string `json:"bases"`
	// Conns is the number of connections held open.
	Conns int `json:"conns"`
	// Shop, Item and Location are what each reserve holds (1 unit).
	Shop     int64 `json:"shop"`
	Item     int64 `json:"item"`
	Location int64 `json:"location"`
	// Token is the checkout API client's bearer token.
	Token string `json:"token"`
	// Pause is how long a connection waits after an answer before its
	// next reserve.
	Pause time.Duration `json:"pause_ns"`
}

// FloodStats are what the attackers saw: requests opened (written),
// answered by status, and cut by the server without an answer.
type FloodStats struct {
	Opened   int64         `json:"opened"`
	Answered int64         `json:"answered"`
	Cuts     int64         `json:"cuts"`
	Statuses map[int]int64 `json:"statuses"`
	// Seconds is how long the flood ran.
	Seconds float64 `json:"seconds"`
}

// ShedRate is the share of answers that were 503 (shed).
func (s FloodStats) ShedRate() float64 {
	if s.Answered == 0 {
		return 0
	}
	return float64(s.Statuses[http.StatusServiceUnavailable]) / float64(s.Answered)
}

// RunFlood is the attackers' process: it reads the FloodSpec in spec,
// floods until stop is closed (or at EOF on it), and writes its FloodStats
// to out on the FloodStatsPrefix line.
func RunFlood(ctx context.Context, spec string, stop io.Reader, out io.Writer) error {
	var fs FloodSpec
	if err := json.Unmarshal([]byte(spec), &fs); err != nil {
		return fmt.Errorf("bench: $%s: %w", FloodEnv, err)
	}
	if len(fs.Bases) == 0 || fs.Conns < 1 {
		return fmt.Errorf("bench: $%s: needs bases and conns", FloodEnv)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stop) // the parent closes it, or dies
		cancel()
	}()
	st := flood(ctx, fs)
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s%s\n", FloodStatsPrefix, b)
	return err
}

// flood holds fs.Conns connections, each sending reserves one after the
// other (keep-alive) and opening a new connection when the server closes
// one, until ctx ends.
func flood(ctx context.Context, fs FloodSpec) FloodStats {
	var (
		wg                     sync.WaitGroup
		opened, answered, cuts atomic.Int64
		mu                     sync.Mutex
		statuses               = map[int]int64{}
	)
	start := time.Now()
	for i := range fs.Conns {
		base := strings.TrimPrefix(fs.Bases[i%len(fs.Bases)], "http://")
		wg.Go(func() {
			a := attacker{spec: fs, addr: base, id: fmt.Sprintf("f%d-%d", os.Getpid(), i)}
			for ctx.Err() == nil {
				status, err := a.call(ctx)
				opened.Add(1)
				switch {
				case status > 0:
					answered.Add(1)
					mu.Lock()
					statuses[status]++
					mu.Unlock()
				case err != nil && ctx.Err() == nil:
					cuts.Add(1)
				}
				// A connection that failed comes back after a moment
				// at least: a refused dial in a tight loop would only
				// measure this process's own CPU.
				pause := fs.Pause
				if status == 0 {
					pause = max(pause, 10*time.Millisecond)
				}
				if pause > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(pause):
					}
				}
			}
			a.close()
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return FloodStats{Opened: opened.Load(), Answered: answered.Load(), Cuts: cuts.Load(), Statuses: statuses, Seconds: time.Since(start).Seconds()}
}

// attacker is one flooding connection.
type attacker struct {
	spec FloodSpec
	addr string
	id   string
	seq  int
	conn net.Conn
	rd   *bufio.Reader
	stop func() bool
}

func (a *attacker) close() {
	if a.conn != nil {
		a.stop()
		a.conn.Close()
		a.conn, a.rd = nil, nil
	}
}

// call sends one reserve on the attacker's connection (opening one if
// needed) and reads the answer: its status, or 0 and the error when the
// connection failed or was cut first.
func (a *attacker) call(ctx context.Context) (int, error) {
	if a.conn == nil {
		c, err := net.DialTimeout("tcp", a.addr, 5*time.Second)
		if err != nil {
			return 0, err
		}
		a.conn, a.rd = c, bufio.NewReaderSize(c, 4096)
		a.stop = context.AfterFunc(ctx, func() { c.Close() })
	}
	a.seq++
	body := fmt.Sprintf(`{"token":"%s-%d","ttl_ms":60000,"lines":[{"item":%d,"quantity":1,"locations":[%d]}]}`,
		a.id, a.seq, a.spec.Item, a.spec.Location)
	if _, err := fmt.Fprintf(a.conn, "POST /v1/shops/%d/reservations HTTP/1.1\r\nHost: reservoir\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		a.spec.Shop, a.spec.Token, len(body), body); err != nil {
		a.close()
		return 0, err
	}
	res, err := http.ReadResponse(a.rd, nil)
	if err != nil {
		a.close()
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.Close {
		a.close()
	}
	return res.StatusCode, nil
}

// floodProc is a running attackers' process.
type floodProc struct {
	cmd   *exec.Cmd
	stdin io.Closer
	out   syncBuffer
	done  chan struct{}
	err   error
}

// startFlood starts the attackers' process: binary (the bench's own) run
// as `binary bench` with FloodEnv set to spec, on one core, at CPU
// priority nice (through nice(1); 0: as this process).
func startFlood(binary string, spec FloodSpec, nice int) (*floodProc, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, "bench")
	if nice != 0 {
		cmd = exec.Command("nice", "-n", strconv.Itoa(nice), binary, "bench")
	}
	f := &floodProc{cmd: cmd, done: make(chan struct{})}
	f.cmd.Env = append(os.Environ(), FloodEnv+"="+string(js), "GOMAXPROCS=1")
	f.cmd.Stdout, f.cmd.Stderr = &f.out, &f.out
	stdin, err := f.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	f.stdin = stdin
	if err := f.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the attackers' process %s: %w", binary, err)
	}
	go func() {
		f.err = f.cmd.Wait()
		close(f.done)
	}()
	return f, nil
}

// stop ends the flood (every attacking connection is closed when it
// returns) and reads what the attackers saw.
func (f *floodProc) stop() (FloodStats, error) {
	f.stdin.Close()
	select {
	case <-f.done:
	case <-time.After(30 * time.Second):
		_ = f.cmd.Process.Kill()
		<-f.done
	}
	if f.err != nil {
		return FloodStats{}, fmt.Errorf("the attackers' process: %w: %s", f.err, tail(f.out.String(), 2000))
	}
	for line := range strings.SplitSeq(f.out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, FloodStatsPrefix); ok {
			var st FloodStats
			if err := json.Unmarshal([]byte(rest), &st); err != nil {
				return FloodStats{}, fmt.Errorf("the attackers' report %q: %w", rest, err)
			}
			return st, nil
		}
	}
	return FloodStats{}, fmt.Errorf("the attackers' process reported nothing: %s", tail(f.out.String(), 2000))
}

// alive reports whether the process still runs.
func (f *floodProc) alive() bool {
	select {
	case <-f.done:
		return false
	default:
		return true
	}
}

// syncBuffer is a goroutine-safe buffer a child process writes to.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Keep the last 256 KiB: a child's log may be long.
	if s.b.Len() > 256<<10 {
		rest := s.b.String()[s.b.Len()-128<<10:]
		s.b.Reset()
		s.b.WriteString(rest)
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
