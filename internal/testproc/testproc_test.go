package testproc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveTemplate()
	os.Exit(code)
}

// openMySQL opens a pool on s whose dial gives up fast, as a store's pool
// under a fault should: a call's context bounds the rest (the handshake
// included).
func openMySQL(t *testing.T, s *Server) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 300 * time.Millisecond
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func count(t *testing.T, db *sql.DB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM p.t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A killed MariaDB refuses connections, and once started again it has
// every row it committed before the kill, on the same address.
func TestMySQLKillAndStart(t *testing.T) {
	t.Parallel()
	s := MySQL(t)
	db := openMySQL(t, s)
	mustExec(t, db, "CREATE DATABASE p")
	mustExec(t, db, "CREATE TABLE p.t (id INT PRIMARY KEY)")
	for i := range 100 {
		mustExec(t, db, fmt.Sprintf("INSERT INTO p.t VALUES (%d)", i))
	}
	before := s.Pid()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if alive(before) {
		t.Fatalf("pid %d alive after Kill", before)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := db.PingContext(ctx)
	cancel()
	if err == nil {
		t.Fatal("ping answered while the server was killed")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if s.Pid() == 0 || s.Pid() == before {
		t.Fatalf("pid after Start %d, before the kill %d: want a new process", s.Pid(), before)
	}
	if n := count(t, db); n != 100 {
		t.Fatalf("%d rows after the restart, want the 100 committed before the kill", n)
	}
	if err := s.Start(); err == nil {
		t.Error("Start on a running server: no error")
	}
}

// A paused MariaDB accepts the TCP connection but never sends the
// handshake: the caller's context ends the wait. Resumed, it answers.
func TestMySQLPauseAndResume(t *testing.T) {
	t.Parallel()
	s := MySQL(t)
	db := openMySQL(t, s)
	mustExec(t, db, "SELECT 1")
	db.SetMaxIdleConns(0) // every call dials: the handshake is what must time out
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if got := state(s.Pid()); got != "T" {
		t.Fatalf("state %q after Pause, want T (stopped)", got)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err := db.PingContext(ctx)
	cancel()
	if err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("ping of a paused server: %v after %s, want an error within the call's deadline", err, time.Since(start))
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, "SELECT 1")
}

// A killed Redis comes back with every write it acknowledged (its
// append-only file), and a paused one makes callers wait for their own
// deadlines.
func TestRedisKillPauseAndStart(t *testing.T) {
	t.Parallel()
	s := Redis(t)
	if s.DSN != "" {
		t.Errorf("a Redis has DSN %q", s.DSN)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 300 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	for i := range 1000 {
		if err := c.Set(ctx, fmt.Sprint("k", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("ping answered while the server was killed")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 1000 {
		t.Fatalf("DBSIZE after the restart: %d %v, want the 1000 keys written before the kill", n, err)
	}

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := c.Set(pctx, "during", 1, 0).Err()
	cancel()
	var ne interface{ Timeout() bool }
	if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("SET on a paused server: %v, want a timeout", err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	// The SET the caller gave up on was in the socket's buffer: it runs
	// once the server runs. An unknown outcome, as after a lost reply.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

// The cleanup stops a paused server (resuming it first) and a killed one,
// and removes their directories.
func TestCleanupStopsEveryServer(t *testing.T) {
	t.Parallel()
	requirePrograms(t, targetRedis) // here, not in "use" only: what follows reads its servers
	var paused, killed *Server
	var pid int
	t.Run("use", func(t *testing.T) {
		paused, killed = Redis(t), Redis(t)
		pid = paused.Pid()
		if err := paused.Pause(); err != nil {
			t.Fatal(err)
		}
		if err := killed.Kill(); err != nil {
			t.Fatal(err)
		}
	})
	if alive(pid) {
		t.Errorf("paused server's pid %d alive after the test ended", pid)
	}
	for _, s := range []*Server{paused, killed} {
		if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: directory %s left: %v", s, s.dir, err)
		}
	}
}

// Two private MariaDB servers run side by side, each with its own data.
func TestMySQLServersAreSeparate(t *testing.T) {
	t.Parallel()
	a, b := MySQL(t), MySQL(t)
	if a.Addr == b.Addr || a.dir == b.dir {
		t.Fatalf("two servers share %s / %s", a.Addr, a.dir)
	}
	mustExec(t, openMySQL(t, a), "CREATE DATABASE p")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := openMySQL(t, b).QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'p'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("b sees a's database: %d %v", n, err)
	}
}

// A test binary that died without its cleanups leaves its servers running
// and its directories behind: the next binary to start a server stops
// them and removes them, and leaves alone what a live binary owns.
func TestOrphansAreReaped(t *testing.T) {
	t.Parallel()
	requirePrograms(t, targetRedis)
	script, err := scriptPath()
	if err != nil {
		t.Fatal(err)
	}
	gone := osexec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := gone.Process.Pid // exited and reaped: no such process now
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-redis-%d-", dirPrefix, dead, port))
	if err != nil {
		t.Fatal(err)
	}
	orphan := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), target: targetRedis, dir: dir, port: port, script: script}
	t.Cleanup(func() { _ = orphan.stop() }) // if the reaper failed
	orphan.mu.Lock()
	err = orphan.startLocked()
	orphan.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	template, err := os.MkdirTemp("", fmt.Sprintf("%s%d-template-", dirPrefix, dead))
	if err != nil {
		t.Fatal(err)
	}
	live, err := os.MkdirTemp("", fmt.Sprintf("%s%d-template-", dirPrefix, os.Getppid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(live) })

	reaped := reapOrphans(script)
	if alive(orphan.pid) {
		t.Errorf("the orphaned redis-server (pid %d) still runs; reaper said %q", orphan.pid, reaped)
	}
	for _, d := range []string{dir, template} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v; reaper said %q", d, err, reaped)
		}
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the directory of a live process (pid %d) was removed: %v", os.Getppid(), err)
	}
}

// RESERVOIR_MYSQL_FSYNC_DELAY puts the shim in force: with a commit that
// syncs its redo log (innodb_flush_log_at_trx_commit=1), each commit waits
// at least the delay. A lower bound only (the machine may add to it, never
// take from it): without the shim these commits take a few milliseconds
// in all, far under the bound.
func TestMySQLFsyncDelay(t *testing.T) {
	const delay, commits = 40 * time.Millisecond, 5
	s := MySQLWith(t, "RESERVOIR_MYSQL_FSYNC_DELAY=40ms", "RESERVOIR_MYSQL_FLUSH=1")
	db := openMySQL(t, s)
	ctx := context.Background()
	for _, q := range []string{"CREATE DATABASE fsd", "CREATE TABLE fsd.t (id INT PRIMARY KEY AUTO_INCREMENT, v INT) ENGINE=InnoDB"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for range commits {
		if _, err := db.ExecContext(ctx, "INSERT INTO fsd.t (v) VALUES (1)"); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took < commits*delay {
		t.Errorf("%d commits took %v with a %v fsync delay, want at least %v: the shim is not in force", commits, took, delay, commits*delay)
	}
}
