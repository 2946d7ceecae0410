// Package testproc starts a private MariaDB (mariadbd) or Redis
// (redis-server) for one test, so that the test can do to a real server
// process what the shared test servers must never suffer: kill it
// (SIGKILL) and start it again on the same port and data, or pause it
// (SIGSTOP) and resume it (SIGCONT).
//
// Each server is started by the project's own scripts/services, with its
// whole state under a throwaway directory (RESERVOIR_RUN_DIR) and on a free
// loopback port, so it is configured exactly as the shared servers are.
// A fresh MariaDB data directory takes seconds to initialise: it is made
// once per test binary, as a template that every private MariaDB copies.
// The private Redis keeps an append-only file (RESERVOIR_REDIS_AOF=1), so
// a killed one comes back with every write it acknowledged, as a
// production Redis with persistence does.
//
// A server outlives the test binary that started it (the script detaches
// it): one that ended without its cleanups (a timeout, a kill) leaves its
// servers running, and the next binary that starts a server stops them
// and removes their directories.
//
// It owns those processes and directories and nothing else: it never
// touches the shared servers (RESERVOIR_MYSQL_DSN, RESERVOIR_REDIS_ADDR)
// and never installs anything. Where the servers' programs are missing,
// the test is skipped, saying which; the script would otherwise run apt.
//
// Linux only: it signals processes and reads /proc, as the script does.
package testproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seed31b0e981/reservoir/internal/testtier"
)

// target is a scripts/services target.
type target string

const (
	targetMySQL target = "mysql"
	targetRedis target = "redis"
)

// Server is one private server process and its directory. Kill, Pause,
// Resume and Start may be called from any goroutine, one at a time or
// concurrently (they are serialised); the test's cleanup resumes a paused
// server, stops it and removes its directory.
type Server struct {
	// Addr is the address clients dial (127.0.0.1:port). It stays the same
	// across a kill and a start.
	Addr string
	// DSN is, for MariaDB, root over plain TCP with no password and no
	// database, as scripts/services prints it for the shared server
	// (RESERVOIR_MYSQL_DSN). It is "" for Redis.
	DSN string

	target target
	dir    string // RESERVOIR_RUN_DIR
	port   int
	script string
	env    []string // more of scripts/services' settings, NAME=value

	mu     sync.Mutex // serialises the signals and the script runs
	pid    int        // 0 while killed or stopped
	paused bool
}

// MySQL starts a private MariaDB for the test (root over TCP, no
// password, no database but the system ones) and stops it when the test
// ends. It skips the test if MariaDB's programs are not installed, and
// under -short (testtier).
func MySQL(t testing.TB) *Server {
	t.Helper()
	return newServer(t, targetMySQL)
}

// MySQLWith is MySQL with more of scripts/services' settings for the
// server, as NAME=value: RESERVOIR_MYSQL_FLUSH, RESERVOIR_MYSQL_BINLOG,
// RESERVOIR_MYSQL_FSYNC_DELAY. A private server takes none of them from
// the test's own environment, so without them it starts as MySQL's does.
func MySQLWith(t testing.TB, settings ...string) *Server {
	t.Helper()
	return newServer(t, targetMySQL, settings...)
}

// Redis starts a private standalone Redis for the test, with an
// append-only file, and stops it when the test ends. It skips the test if
// Redis's programs are not installed, and under -short (testtier).
func Redis(t testing.TB) *Server {
	t.Helper()
	return newServer(t, targetRedis)
}

// String names the server for test logs.
func (s *Server) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	state := fmt.Sprintf("pid %d", s.pid)
	switch {
	case s.pid == 0:
		state = "killed"
	case s.paused:
		state += ", paused"
	}
	return fmt.Sprintf("private %s on %s (%s)", s.target, s.Addr, state)
}

// Pid is the server's process id, 0 while it is killed.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// Kill sends SIGKILL to the server (paused or not) and waits until the
// process is gone: from then on its port refuses connections. What was
// committed survives for Start (MariaDB's redo log is written before a
// commit is answered, Redis's append-only file before a reply).
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pid == 0 {
		return fmt.Errorf("testproc: kill %s on %s: not running", s.target, s.Addr)
	}
	if err := syscall.Kill(s.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("testproc: kill %s pid %d: %w", s.target, s.pid, err)
	}
	if err := waitState(s.pid, gone, 10*time.Second); err != nil {
		return fmt.Errorf("testproc: kill %s: %w", s.target, err)
	}
	s.pid, s.paused = 0, false
	return nil
}

// Pause sends SIGSTOP to the server and waits until it is stopped. Its
// port still accepts connections (the kernel completes the handshake into
// the listen backlog) but nothing answers: clients wait for their own
// deadlines, and what they sent runs when the server is resumed.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pid == 0 || s.paused {
		return fmt.Errorf("testproc: pause %s on %s: not running, or paused already", s.target, s.Addr)
	}
	if err := syscall.Kill(s.pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("testproc: pause %s pid %d: %w", s.target, s.pid, err)
	}
	if err := waitState(s.pid, stopped, 10*time.Second); err != nil {
		return fmt.Errorf("testproc: pause %s: %w", s.target, err)
	}
	s.paused = true
	return nil
}

// Resume sends SIGCONT to a paused server and waits until it runs again.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resumeLocked()
}

func (s *Server) resumeLocked() error {
	if s.pid == 0 || !s.paused {
		return fmt.Errorf("testproc: resume %s on %s: not paused", s.target, s.Addr)
	}
	if err := syscall.Kill(s.pid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("testproc: resume %s pid %d: %w", s.target, s.pid, err)
	}
	if err := waitState(s.pid, running, 10*time.Second); err != nil {
		return fmt.Errorf("testproc: resume %s: %w", s.target, err)
	}
	s.paused = false
	return nil
}

// Start starts a killed server again, on the same port and data, and
// returns once it answers (after MariaDB's crash recovery, after Redis has
// loaded its append-only file).
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pid != 0 {
		return fmt.Errorf("testproc: start %s on %s: pid %d is running", s.target, s.Addr, s.pid)
	}
	return s.startLocked()
}

// startLocked runs `scripts/services start TARGET` in the server's
// directory and records the pid that `status` reports. The script leaves
// alone a server that already answers on the port: a pid it does not
// report is a server that is not ours (errNotOurs).
func (s *Server) startLocked() error {
	out, err := s.run("start", string(s.target))
	if err != nil {
		return err
	}
	name := "RESERVOIR_REDIS_ADDR"
	if s.target == targetMySQL {
		name = "RESERVOIR_MYSQL_DSN"
	}
	got := exported(out, name)
	if got == "" {
		return fmt.Errorf("testproc: scripts/services start %s printed no %s:\n%s", s.target, name, out)
	}
	pid, err := s.statusPid()
	if err != nil {
		return err
	}
	if pid == 0 {
		return fmt.Errorf("%w: something else answers on %s", errNotOurs, s.Addr)
	}
	// DSN is set once, before the Server is handed out: readers do not
	// lock.
	switch {
	case s.target != targetMySQL:
	case s.DSN == "":
		s.DSN = got
	case got != s.DSN:
		return fmt.Errorf("testproc: %s restarted with DSN %q, was %q", s.target, got, s.DSN)
	}
	s.pid, s.paused = pid, false
	return nil
}

// errNotOurs: a server this package did not start answers on the port it
// picked (another program took the port between the pick and the start).
var errNotOurs = errors.New("testproc: the port is not ours")

// stop is the test's cleanup: a paused server is resumed (a stopped
// process would never act on a shutdown request), the script stops it,
// SIGKILL if it did not, and the directory goes.
func (s *Server) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.paused {
		errs = append(errs, s.resumeLocked())
	}
	if _, err := s.run("stop", string(s.target)); err != nil {
		errs = append(errs, err)
	}
	if s.pid != 0 && alive(s.pid) {
		errs = append(errs, fmt.Errorf("testproc: %s pid %d outlived scripts/services stop; killing it", s.target, s.pid))
		_ = syscall.Kill(s.pid, syscall.SIGKILL)
		errs = append(errs, waitState(s.pid, gone, 10*time.Second))
	}
	s.pid = 0
	errs = append(errs, os.RemoveAll(s.dir))
	return errors.Join(errs...)
}

// scriptTimeout bounds one script run: its own timeouts (30 s for a
// MariaDB start, 30 s for a stop before SIGTERM) come first.
const scriptTimeout = 2 * time.Minute

// run runs scripts/services with the server's directory and port and
// returns its stdout (the export lines); an error carries its stderr.
func (s *Server) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.script, args...)
	// The target's port is ours; the other server's port is left at the
	// script's default (env and status only ping it). Ours on both would
	// have the script ping Redis with a MySQL client, which waits its
	// whole connect timeout for a handshake that never comes.
	port := "RESERVOIR_MYSQL_PORT"
	if s.target == targetRedis {
		port = "RESERVOIR_REDIS_PORT"
	}
	cmd.Env = append(withoutEnv(os.Environ(), "RESERVOIR_RUN_DIR", "RESERVOIR_MYSQL_PORT", "RESERVOIR_REDIS_PORT", "RESERVOIR_REDIS_AOF",
		"RESERVOIR_MYSQL_FLUSH", "RESERVOIR_MYSQL_BINLOG", "RESERVOIR_MYSQL_FSYNC_DELAY"),
		"RESERVOIR_RUN_DIR="+s.dir, port+"="+strconv.Itoa(s.port), "RESERVOIR_REDIS_AOF=1")
	cmd.Env = append(cmd.Env, s.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("testproc: scripts/services %s (RESERVOIR_RUN_DIR=%s, port %d): %w\n%s", strings.Join(args, " "), s.dir, s.port, err, stderr.String())
	}
	return stdout.String(), nil
}

// withoutEnv drops the entries of names from env.
func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		if !slices.Contains(names, name) {
			out = append(out, e)
		}
	}
	return out
}

// statusLine is one line of `scripts/services status`:
// "NAME STATE port=PORT pid=PID" (pid "-" when none is ours).
var statusLine = regexp.MustCompile(`^(\S+)\s+(\S+)\s+port=(\d+)\s+pid=(\S+)`)

// statusPid returns the pid `scripts/services status` reports for the
// server, 0 if none of the script's in our directory is alive.
func (s *Server) statusPid() (int, error) {
	out, err := s.run("status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(out) {
		m := statusLine.FindStringSubmatch(line)
		if m == nil || m[1] != string(s.target) {
			continue
		}
		if m[3] != strconv.Itoa(s.port) {
			return 0, fmt.Errorf("testproc: scripts/services status reports %s on port %s, want %d:\n%s", s.target, m[3], s.port, out)
		}
		if m[2] != "running" || m[4] == "-" {
			return 0, nil
		}
		return strconv.Atoi(m[4])
	}
	return 0, fmt.Errorf("testproc: scripts/services status has no %s line:\n%s", s.target, out)
}

// exported returns the value of `export NAME='VALUE'` in the script's
// output, "" if it is not there.
func exported(out, name string) string {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "export "+name+"='"); ok {
			return strings.TrimSuffix(v, "'")
		}
	}
	return ""
}

// newServer starts a server for t, picking another port if the one it
// picked turns out to be taken.
func newServer(t testing.TB, tg target, settings ...string) *Server {
	t.Helper()
	requirePrograms(t, tg)
	script, err := scriptPath()
	if err != nil {
		t.Fatal(err)
	}
	reaper.Do(func() { reaper.reaped = reapOrphans(script) })
	for _, r := range reaper.reaped {
		t.Logf("testproc: %s", r)
	}
	var template string
	if tg == targetMySQL {
		if template, err = mysqlTemplate(script); err != nil {
			t.Fatal(err)
		}
	}
	for attempt := 1; ; attempt++ {
		s, err := launch(tg, script, template, settings...)
		if err == nil {
			t.Cleanup(func() {
				if err := s.stop(); err != nil {
					t.Errorf("stop %s: %v", s.Addr, err)
				}
			})
			return s
		}
		if !errors.Is(err, errNotOurs) || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("%v; trying another port", err)
	}
}

// launch makes a directory (a copy of template, if one is given), picks a
// port and starts the server there.
func launch(tg target, script, template string, settings ...string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-%s-%d-", dirPrefix, os.Getpid(), tg, port))
	if err != nil {
		return nil, err
	}
	if template != "" {
		if err := copyTree(template, dir); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("testproc: copy the MariaDB template: %w", err)
		}
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), target: tg, dir: dir, port: port, script: script, env: settings}
	s.mu.Lock()
	err = s.startLocked()
	s.mu.Unlock()
	if err != nil {
		// A half-started server of ours is stopped with the directory.
		return nil, errors.Join(err, s.stop())
	}
	return s, nil
}

// The MariaDB template: one data directory per test binary, made by the
// script's own first start (mariadb-install-db, then the redo log) and
// cleanly shut down. A copy starts in well under a second.
var template struct {
	once sync.Once
	dir  string
	err  error
}

func mysqlTemplate(script string) (string, error) {
	template.once.Do(func() {
		var s *Server
		for attempt := 1; ; attempt++ {
			s, template.err = launch(targetMySQL, script, "")
			if !errors.Is(template.err, errNotOurs) || attempt == 3 {
				break
			}
		}
		if template.err != nil {
			template.err = fmt.Errorf("testproc: make the MariaDB template: %w", template.err)
			return
		}
		// A clean shutdown: the copies start without crash recovery.
		if _, err := s.run("stop", "mysql"); err != nil {
			template.err = errors.Join(fmt.Errorf("testproc: stop the MariaDB template: %w", err), s.stop())
			return
		}
		// mariadbd writes its redo log past the page cache (O_DIRECT): a
		// copy would read all of it from disk. Copied once, sparsely, it is
		// mostly holes, which each server's copy skips.
		dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-template-", dirPrefix, os.Getpid()))
		if err == nil {
			err = copyTree(s.dir, dir)
		}
		if err != nil {
			template.err = errors.Join(fmt.Errorf("testproc: copy the MariaDB template: %w", err), os.RemoveAll(dir), os.RemoveAll(s.dir))
			return
		}
		template.err = os.RemoveAll(s.dir)
		template.dir = dir
	})
	return template.dir, template.err
}

// RemoveTemplate removes the MariaDB template this test binary made, if
// any. A package whose tests start private MariaDB servers calls it from
// TestMain after m.Run; without it the template (a few MB, sparse) stays
// in the temporary directory until the next test binary that starts a
// server removes it (reapOrphans).
func RemoveTemplate() {
	if template.dir != "" {
		_ = os.RemoveAll(template.dir)
	}
}

// dirPrefix starts the name of every directory this package makes in the
// temporary directory. The rest of the name says what a later test binary
// needs to clean up after one that ended without its cleanups (a test
// binary's timeout panics, a kill): the pid of the binary that made it,
// then "template", or the server's target and port, then random digits.
const dirPrefix = "reservoir-testproc-"

// reaper runs reapOrphans once per test binary.
var reaper struct {
	sync.Once
	reaped []string
}

// reapOrphans stops the servers and removes the directories of test
// binaries that are gone, and says what it did. Servers outlive the
// binary that started them (scripts/services detaches them), so one that
// died without its cleanups leaves them running. A directory whose maker
// is alive, or whose pid was taken by another process since, is left
// alone. Each server is stopped by scripts/services with its own
// directory and port, which acts only on a server whose pid file is in
// that directory.
func reapOrphans(script string) []string {
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		return []string{fmt.Sprintf("look for orphans: %v", err)}
	}
	var done []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), dirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		f := strings.Split(rest, "-") // pid, "template" | target, [port], random
		pid, err := strconv.Atoi(f[0])
		if err != nil || pid == os.Getpid() || state(pid) != "" {
			continue
		}
		dir := filepath.Join(os.TempDir(), e.Name())
		switch {
		case len(f) == 3 && f[1] == "template":
		case len(f) == 4 && (f[1] == string(targetMySQL) || f[1] == string(targetRedis)):
			port, err := strconv.Atoi(f[2])
			if err != nil {
				continue
			}
			orphan := &Server{target: target(f[1]), dir: dir, port: port, script: script}
			if _, err := orphan.run("stop", f[1]); err != nil {
				done = append(done, fmt.Sprintf("stop the orphaned %s in %s: %v", f[1], dir, err))
				continue
			}
		default:
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			done = append(done, fmt.Sprintf("remove %s: %v", dir, err))
			continue
		}
		done = append(done, fmt.Sprintf("removed %s, left by pid %d, which is gone", dir, pid))
	}
	return done
}

// copyTree copies the template's files into dir, sparsely: the redo log is
// hundreds of MB of mostly zeros, and a hole costs neither time nor disk.
// Only directories and regular files are copied: the template has no
// socket, and its lock file belongs to it.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, info.Mode().Perm())
		case !info.Mode().IsRegular() || rel == ".lock":
			return nil
		}
		return copySparse(path, to, info)
	})
}

// copyBlock is the unit copySparse reads, and leaves as a hole if it is
// all zeros.
const copyBlock = 64 << 10

// copySparse copies src's data to dst, block by block, where a block of
// zeros becomes a hole. Only src's data extents are read (SEEK_DATA,
// SEEK_HOLE): a sparse source's holes cost nothing.
func copySparse(src, dst string, info fs.FileInfo) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	buf := make([]byte, copyBlock)
	size := info.Size()
	for off := int64(0); off < size; {
		data, err := in.Seek(off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // a hole to the end
		} else if err != nil {
			return err
		}
		hole, err := in.Seek(data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return err
		}
		for off = data; off < hole; {
			n, err := io.ReadFull(in, buf[:min(int64(len(buf)), hole-off)])
			if err != nil {
				return err
			}
			if !allZero(buf[:n]) {
				if _, err := out.WriteAt(buf[:n], off); err != nil {
					return err
				}
			}
			off += int64(n)
		}
	}
	// Holes at the end are only the size.
	return out.Truncate(size)
}

// zeros is a block of zeros to compare with: bytes.Equal is one assembly
// loop, where a Go loop over 300 MB costs seconds under the race detector.
var zeros = make([]byte, copyBlock)

func allZero(b []byte) bool { return bytes.Equal(b, zeros[:len(b)]) }

// Ports are picked below 32768, the start of Linux's default ephemeral
// range: no outgoing connection's local port and no other program's
// port-0 listener lands there, so a port free now is very likely still
// free when the server binds it a second later. A port once picked is
// never picked again by this binary: a killed server comes back on it.
const (
	portMin = 20000
	portMax = 32000
)

var ports struct {
	mu   sync.Mutex
	used map[int]bool
}

func freePort() (int, error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.used == nil {
		ports.used = map[int]bool{}
	}
	for range 200 {
		p := portMin + rand.IntN(portMax-portMin)
		if ports.used[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = l.Close()
		ports.used[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("testproc: no free port in 127.0.0.1:%d-%d", portMin, portMax)
}

// scriptPath finds scripts/services at the root of the module, the first
// directory holding go.mod above the test's working directory (its
// package's directory).
func scriptPath() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "scripts", "services"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testproc: no go.mod above the working directory: cannot find scripts/services")
		}
		dir = parent
	}
}

// programs are what scripts/services runs for a target, and what its
// status command needs (the tools of both servers): where one is missing
// the script would install it with apt, which a test must never set off.
var programs = map[target][]string{
	targetMySQL: {"mariadbd", "mariadb-install-db", "mariadb-admin", "mariadb", "openssl", "redis-cli"},
	targetRedis: {"redis-server", "redis-cli", "mariadb-admin"},
}

// requirePrograms skips the test if a program the target needs is not
// installed, and under -short (testtier): a private server is a process
// to start. The search path adds the sbin directories the script adds:
// Debian keeps mariadbd in /usr/sbin.
func requirePrograms(t testing.TB, tg target) {
	t.Helper()
	testtier.Needs(t, fmt.Sprintf("a private %s server process (scripts/services start %s)", tg, tg))
	dirs := append(filepath.SplitList(os.Getenv("PATH")), "/usr/local/sbin", "/usr/sbin", "/sbin")
	var missing []string
	for _, p := range programs[tg] {
		found := false
		for _, d := range dirs {
			if st, err := os.Stat(filepath.Join(d, p)); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		t.Skipf("a private %s needs %s, not installed (scripts/services start %s installs them)", tg, strings.Join(missing, ", "), tg)
	}
}

// The states waitState waits for.
type procState int

const (
	gone procState = iota
	stopped
	running
)

// waitState polls /proc until pid is in state want: gone (no such process,
// or a zombie: a killed server whose parent exited is reparented to PID 1,
// which in a container may never reap it; a zombie holds no port and no
// file), stopped (SIGSTOP took effect), or running (anything else alive).
func waitState(pid int, want procState, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st := state(pid)
		var got procState
		switch {
		case st == "" || st == "Z" || st == "X":
			got = gone
		case st == "T":
			got = stopped
		default:
			got = running
		}
		if got == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d still in state %q after %s", pid, st, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st := state(pid)
	return st != "" && st != "Z" && st != "X"
}

// state is pid's state letter from /proc/PID/stat, "" if there is no such
// process. The second field, "(comm)", may hold spaces and ')': the state
// is the first field after the last ')'.
func state(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}
