package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
)

// CredentialFiles names the files a server's credentials come from, for
// it to reread them while it runs (ReloadCredentials, WatchCredentials):
// rotating a token or adding an operator then needs no restart.
type CredentialFiles struct {
	// Clients is the checkout API's clients file (ParseClients).
	Clients string
	// Operators is the admin API's operators file (ParseOperators).
	Operators string
	// AdminToken is the file holding the shared admin token (its content,
	// trimmed: at least 16 bytes).
	AdminToken string
}

// The credential sources, as the metrics' source label names them.
const (
	sourceClients    = "clients"
	sourceOperators  = "operators"
	sourceAdminToken = "admin_token"
)

// credentials is what a reload works from: the files, what was last
// loaded from each (a source that fails to load keeps it), and the
// metrics of the reloads.
type credentials struct {
	files CredentialFiles

	mu     sync.Mutex // one reload at a time
	ops    *Operators
	legacy *[sha256.Size]byte // the shared admin token's digest; nil: none

	errorsTotal *prometheus.CounterVec
	lastLoad    *prometheus.GaugeVec
}

// initCredentials puts cfg's credentials in force and registers the
// reload metrics.
func (s *Server) initCredentials(cfg Config) error {
	c := &credentials{
		files: cfg.CredentialFiles,
		ops:   cfg.Operators,
		errorsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_credentials_reload_errors_total",
			Help: "Reloads of a credentials file (clients, operators, admin_token) that failed: the credentials loaded before stay in force. The log says why.",
		}, []string{"source"}),
		lastLoad: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reservoir_credentials_last_load_timestamp_seconds",
			Help: "When each credentials source (clients, operators, admin_token) was last loaded successfully, at start or by a reload (Unix seconds).",
		}, []string{"source"}),
	}
	if cfg.AdminToken != "" {
		d := sha256.Sum256([]byte(cfg.AdminToken))
		c.legacy = &d
	}
	set, err := newAdminSet(c.ops, c.legacy)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	for _, col := range []prometheus.Collector{c.errorsTotal, c.lastLoad} {
		if err := cfg.Registry.Register(col); err != nil {
			return fmt.Errorf("server: register metrics: %w", err)
		}
	}
	now := float64(time.Now().UnixNano()) / 1e9
	for _, src := range []struct {
		name   string
		loaded bool
		file   string
	}{
		{sourceClients, cfg.Clients != nil, c.files.Clients},
		{sourceOperators, cfg.Operators != nil, c.files.Operators},
		{sourceAdminToken, c.legacy != nil, c.files.AdminToken},
	} {
		if src.loaded {
			c.lastLoad.WithLabelValues(src.name).Set(now)
		}
		if src.loaded || src.file != "" {
			// The series exists from the start at 0, so that increase()
			// and rate() count the first failure too.
			c.errorsTotal.WithLabelValues(src.name)
		}
	}
	s.clients.Store(cfg.Clients)
	s.admins.Store(set)
	s.creds = c
	return nil
}

// ReloadCredentials rereads every file of Config.CredentialFiles and puts
// what loads in force, at once for the calls that follow. A file that
// fails to load (unreadable, invalid, or an admin token shared with an
// operator) keeps what was loaded from it before: a bad edit never locks
// anyone out. Each failure is logged, without any token, and counted in
// reservoir_credentials_reload_errors_total; the error returned joins
// them. why says what asked for the reload (the log says it). SIGHUP and
// WatchCredentials call it.
func (s *Server) ReloadCredentials(why string) error {
	c := s.creds
	c.mu.Lock()
	defer c.mu.Unlock()
	now := float64(time.Now().UnixNano()) / 1e9
	var errs []error
	fail := func(source, path string, err error) {
		c.errorsTotal.WithLabelValues(source).Inc()
		s.log.Error("server: credentials reload failed: the ones loaded before stay in force", "source", source, "file", path, "why", why, "err", err)
		errs = append(errs, err)
	}
	if f := c.files.Clients; f != "" {
		if cs, err := LoadClients(f); err != nil {
			fail(sourceClients, f, err)
		} else {
			s.clients.Store(cs)
			c.lastLoad.WithLabelValues(sourceClients).Set(now)
			s.log.Info("server: clients reloaded", "file", f, "why", why, "clients", len(cs.list))
		}
	}
	// The operators and the shared token make one set: each is loaded on
	// its own, and the set is rebuilt from what loaded.
	ops, legacy := c.ops, c.legacy
	opsOK, legacyOK := false, false
	if f := c.files.Operators; f != "" {
		if o, err := LoadOperators(f); err != nil {
			fail(sourceOperators, f, err)
		} else {
			ops, opsOK = o, true
		}
	}
	if f := c.files.AdminToken; f != "" {
		if d, err := readAdminToken(f); err != nil {
			fail(sourceAdminToken, f, err)
		} else {
			legacy, legacyOK = d, true
		}
	}
	if !opsOK && !legacyOK {
		return errors.Join(errs...)
	}
	set, err := newAdminSet(ops, legacy)
	if err != nil {
		// The files conflict with each other: whichever changed is the
		// one refused.
		src, f := sourceOperators, c.files.Operators
		if !opsOK {
			src, f = sourceAdminToken, c.files.AdminToken
		}
		fail(src, f, err)
		return errors.Join(errs...)
	}
	c.ops, c.legacy = ops, legacy
	s.admins.Store(set)
	if opsOK {
		c.lastLoad.WithLabelValues(sourceOperators).Set(now)
	}
	if legacyOK {
		c.lastLoad.WithLabelValues(sourceAdminToken).Set(now)
	}
	s.log.Info("server: admin identities reloaded", "why", why, "operators", ops.Names(), "shared_admin_token", legacy != nil)
	return errors.Join(errs...)
}

// readAdminToken reads a shared admin token file: its content, trimmed,
// at least 16 bytes. An empty file is an error too: a reload must not
// drop the one identity that may be left.
func readAdminToken(path string) (*[sha256.Size]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if len(token) < minAdminToken {
		return nil, fmt.Errorf("admin token: %s holds %d bytes: it must be at least %d", path, len(token), minAdminToken)
	}
	d := sha256.Sum256([]byte(token))
	return &d, nil
}

// reloadSettle is how long WatchCredentials waits after a change in a
// watched directory for more (an editor's save, or a Secret volume's
// swap, is several events) before it reloads.
const reloadSettle = 100 * time.Millisecond

// WatchCredentials reloads the credentials (ReloadCredentials) whenever
// the directory of one of Config.CredentialFiles changes, until ctx ends.
// It watches the directories, not the files: a Kubernetes Secret volume
// updates by swapping a symlink (..data) beside them, and an editor
// replaces a file by renaming a new one over it; either way a watch on
// the file itself would go on watching the old one. Without files it
// returns at once. It returns an error only when the watch cannot start;
// the credentials loaded stay in force either way, and SIGHUP still
// reloads them.
func (s *Server) WatchCredentials(ctx context.Context) error {
	dirs := map[string]bool{}
	for _, f := range []string{s.creds.files.Clients, s.creds.files.Operators, s.creds.files.AdminToken} {
		if f != "" {
			dirs[filepath.Dir(f)] = true
		}
	}
	if len(dirs) == 0 {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("server: watch credentials: %w", err)
	}
	defer w.Close()
	for d := range dirs {
		if err := w.Add(d); err != nil {
			return fmt.Errorf("server: watch credentials: %s: %w", d, err)
		}
	}
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op == fsnotify.Chmod {
				continue // nothing to read anew
			}
			settle = time.After(reloadSettle)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.log.Warn("server: credentials watch: an event may have been missed; SIGHUP reloads", "err", err)
		case <-settle:
			settle = nil
			_ = s.ReloadCredentials("file changed") // logged and counted there
		}
	}
}
