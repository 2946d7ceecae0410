package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/migrations"
	"github.com/seed31b0e981/reservoir/rollout/flagsource"
)

// healthz says the process is up and serving HTTP. It checks nothing
// else: a liveness probe that failed on a database outage would restart
// every replica at once and make the outage worse.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, wire.Health{Status: "ok"})
}

// The states of a database's schema in /readyz, besides the store*
// classes of a version that could not be read.
const (
	// schemaCurrent: every migration this binary embeds is applied, and
	// none it does not know.
	schemaCurrent = "current"
	// schemaBehind: a migration this binary needs is not applied; the
	// replica is not ready until `reservoir migrate` applies it.
	schemaBehind = "behind"
	// schemaAhead: every migration this binary needs is applied, and
	// newer ones too: a newer binary migrated the database. Ready (a
	// rolling deploy runs the old binary against the new schema for a
	// while), with a warning in the log.
	schemaAhead = "ahead"
)

// The states of a store in /readyz: "ok", or why its ping failed, as a
// class that names no user, host or address.
const (
	// storeOK: the store answered its ping.
	storeOK = "ok"
	// storeUnreachable: no connection (refused, reset, unresolvable name).
	storeUnreachable = "unreachable"
	// storeTimeout: no answer within /readyz's budget (1s).
	storeTimeout = "timeout"
	// storeAuthFailed: the store refused the configured credentials.
	storeAuthFailed = "auth_failed"
	// storeError: any other failure.
	storeError = "error"
)

// readyz pings every store (1s budget) and checks that this replica's
// flags are loaded: a replica that cannot say which store decides a shop
// serves no reservation call, so it must not take traffic. It asks the
// flag source itself (FlagSource.Loaded), not the flag SDK's state:
// flagd's provider can stay in ERROR after one bad file while the source
// keeps answering from the last valid version.
//
// It needs no token (probes have none), so a failed store is shown as its
// pod, its kind and a class of failure only; the driver's error is logged,
// and shown to a caller that presents the admin token.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	detail := false
	if _, code, _ := s.authorize(r); code == "" {
		detail = true
	} else if r.Header.Get("Authorization") != "" {
		// A wrong token is worth counting wherever it is tried.
		s.metrics.authFailures.WithLabelValues(code).Inc()
	}
	// The schema check runs beside the pings, within the same budget; it
	// queries only when its cache is stale (see schemaCheck).
	schema := make(chan []cell.SchemaState, 1)
	go func() { schema <- s.schema().states(ctx, false) }()
	hs := s.cfg.Cell.Ping(ctx)
	v := wire.Ready{Draining: s.draining.Load(), Stores: s.storeHealth(r, hs, detail), FlagsLoaded: s.cfg.Cell.Flags.Loaded()}
	states := <-schema
	if !v.FlagsLoaded {
		v.NotReady = append(v.NotReady, s.flagsNotLoaded(v.Stores[0].MySQL, detail))
	}
	for i, h := range hs {
		if i == 0 {
			if !h.OK {
				v.Degraded = append(v.Degraded, "control: the control database failed its ping ("+v.Stores[0].MySQL+
					"): this replica serves on the flags it has; they cannot be changed until it answers")
			}
			continue
		}
		for _, why := range s.cfg.Cell.Degraded(h) {
			switch why {
			case "mysql failed its ping":
				why += " (" + pingWords(v.Stores[i].MySQL) + ")"
			case "redis failed its ping":
				why += " (" + pingWords(v.Stores[i].Redis) + ")"
			}
			v.Degraded = append(v.Degraded, h.Pod+": "+why)
		}
	}
	pingFailed := map[string]bool{}
	for _, h := range v.Stores {
		pingFailed[h.Pod] = h.MySQL != storeOK
	}
	for _, st := range states {
		h := schemaHealth(st, detail)
		v.Schema = append(v.Schema, h)
		switch {
		case st.Err != nil && !pingFailed[st.Pod]:
			// A database that does not answer its ping is already a
			// degraded already; one that answers but whose version
			// cannot be read is a problem of its own, and of its pod
			// only.
			v.Degraded = append(v.Degraded, st.Pod+": the schema version could not be read ("+h.State+"); the log has the driver's error")
		case st.Err == nil && st.State.Behind():
			v.NotReady = append(v.NotReady, schemaBehindReason(st))
		}
	}
	if v.Draining {
		v.NotReady = append(v.NotReady, "draining: the server is shutting down")
	}
	v.Ready = len(v.NotReady) == 0
	status := http.StatusOK
	if !v.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, v)
}

// flagsNotLoaded says why this replica has no valid flags in force, in
// the terms of the topology's flags_source: where its flags are, what is
// wrong there (the control database's ping, the source's last failure to
// read them, or its refusal of what it read), and what the replica does
// until they are fixed. The file's, the driver's or the daemon's own words
// only with detail (a caller with the admin token; the log has them).
func (s *Server) flagsNotLoaded(controlPing string, detail bool) string {
	src := s.cfg.Cell.Flags
	readErr := src.ReadError()
	_, rejected := src.Rejected()
	because := func(err error) string {
		if detail && err != nil {
			return ": " + err.Error()
		}
		return ""
	}
	var where, cause, until string
	switch s.cfg.Cell.Topology.FlagsSource {
	case topology.FlagsFromDatabase:
		where = `the control database's flags document (flags_source = "database")`
		until = "until it reads a valid document there (it polls the control database)"
		var my *mysql.MySQLError
		switch {
		case controlPing != storeOK:
			cause = "the control database fails its ping (" + controlPing + ", stores[0] here; its error with the admin token): check control_dsn"
		case errors.Is(readErr, flagsource.ErrNoFlagsDocument):
			cause = "the control database holds no flags document yet: `reservoir rollout --topology FILE init` writes the first"
		case errors.As(readErr, &my) && my.Number == 1146: // no such table
			cause = "the control database has no rollout_flags table: control_dsn names another database, or it is not migrated (`reservoir migrate --topology FILE up`)" + because(readErr)
		case readErr != nil:
			cause = "the flags cannot be read from the control database (" + failureClass(readErr) + ")" + because(readErr)
		case rejected != nil:
			cause = "the flags document there was rejected" + because(rejected) + " (`reservoir rollout status` says why; a kill switch or `reservoir rollout init` writes a valid one)"
		}
	case topology.FlagsFromFlagd:
		where = `the flagd daemon at flagd_addr (flags_source = "flagd")`
		until = "until the daemon sends a valid document (it keeps reconnecting)"
		switch {
		case errors.Is(readErr, flagsource.ErrKillDocument):
			cause = "reservoir's kill switch document cannot be read from the control database (" + failureClass(readErr) + "): check control_dsn" + because(readErr)
		case errors.Is(rejected, flagsource.ErrKillDocument):
			cause = "reservoir's kill switch document was rejected" + because(rejected) + " (a kill switch change writes a valid one)"
		case readErr != nil:
			cause = "the daemon cannot be reached or does not answer" + because(readErr)
		case rejected != nil:
			cause = "the daemon's document was rejected" + because(rejected)
		}
	case topology.FlagsFromOFREP:
		where = `the OFREP service at ofrep_url (flags_source = "ofrep")`
		cause = "the service cannot be reached, refuses this replica's token (ofrep_token_env), or fails its certificate check (ofrep_ca_file); the log says which"
		until = "until the service answers (it keeps asking)"
	case topology.FlagsFromProvider:
		where = `the OpenFeature provider this program supplies (flags_source = "provider")`
		cause = "the provider has not reported ready"
		until = "until the provider reports ready"
	default:
		where = `the flags file (flags_source = "file", flags_file)`
		until = "until a valid file is in place (it watches the file)"
		switch {
		case errors.Is(readErr, fs.ErrNotExist):
			cause = "the file does not exist" + because(readErr)
		case readErr != nil:
			cause = "the file cannot be read" + because(readErr)
		case rejected != nil:
			cause = "the file's content was rejected" + because(rejected)
		}
	}
	msg := "flags_not_loaded: this replica has no valid flags in force from " + where
	if cause != "" {
		msg += ": " + cause
	}
	return msg + "; it answers every reservation call 503 flags_unavailable " + until
}

// pingWords says a failed ping's class in words: "cannot connect" is not
// "the schema is behind".
func pingWords(class string) string {
	switch class {
	case storeUnreachable:
		return "unreachable: cannot connect"
	case storeTimeout:
		return "timeout: no answer within 1s"
	case storeAuthFailed:
		return "auth_failed: the credentials were not accepted"
	}
	return class
}

// storeHealth is a ping of the control database and of every pod's MySQL
// and Redis (cell.Ping) as /readyz shows it, with each pod's breakers; it
// logs each failure with the driver's error (which /readyz shows only when
// detail is set). The class of a failure comes from the error's type (a
// *mysql.MySQLError's number, a net.Error), not from matching words in a
// message.
func (s *Server) storeHealth(r *http.Request, hs []cell.Health, detail bool) []wire.StoreHealth {
	out := make([]wire.StoreHealth, len(hs))
	for i, h := range hs {
		out[i] = wire.StoreHealth{Pod: h.Pod, MySQL: s.storeState(r, h.Pod, "mysql", h.MySQLErr), OK: h.OK}
		if i > 0 { // index 0 is the control database: no Redis, no breaker
			out[i].Redis = s.storeState(r, h.Pod, "redis", h.RedisErr)
			if p := s.cfg.Cell.Pod(h.Pod); p != nil {
				my, _ := p.Breakers.MySQL.State()
				rd, _ := p.Breakers.Redis.State()
				out[i].MySQLBreaker, out[i].RedisBreaker = my.String(), rd.String()
			}
		}
		if detail && h.MySQLErr != nil {
			out[i].MySQLError = h.MySQLErr.Error()
		}
		if detail && h.RedisErr != nil {
			out[i].RedisError = h.RedisErr.Error()
		}
	}
	return out
}

// storeState classifies a ping's error (nil is "ok") and logs a failure
// in full. The drivers' errors carry users and hosts but never a
// password: go-sql-driver/mysql and go-redis do not put the DSN's or the
// client's password in their errors.
func (s *Server) storeState(r *http.Request, pod, store string, err error) string {
	if err == nil {
		return storeOK
	}
	class := failureClass(err)
	s.log.Warn("server: readiness: store failed its ping", "request_id", RequestID(r.Context()),
		"pod", pod, "store", store, "reason", class, "err", err)
	return class
}

// failureClass says why a store's ping failed, as one of the store*
// constants, from the error's type.
func failureClass(err error) string {
	var (
		my  *mysql.MySQLError
		rd  redis.Error
		ne  net.Error
		op  *net.OpError
		dns *net.DNSError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return storeTimeout
	case errors.As(err, &my):
		switch my.Number {
		case 1044, 1045, 1130, 1698: // database access denied, access denied for user, host not allowed, no password
			return storeAuthFailed
		}
		return storeError
	case errors.As(err, &rd):
		for _, prefix := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
			if redis.HasErrorPrefix(err, prefix) {
				return storeAuthFailed
			}
		}
		return storeError
	case errors.As(err, &dns), errors.As(err, &op):
		return storeUnreachable
	}
	return storeError
}

// schemaBehindReason says which database lacks which migrations and the
// command that applies them. It names the topology field that holds the
// DSN, never the DSN: it carries a password, and /readyz needs no token.
func schemaBehindReason(st cell.SchemaState) string {
	field := "the topology's mysql_dsn of pod " + st.Pod
	if st.Pod == "control" {
		field = "the topology's control_dsn"
	}
	set := st.Set.Name()
	at := fmt.Sprintf("is at %s migration %s", set, version(st.State.Current))
	if st.State.Legacy > 0 {
		at = fmt.Sprintf("was migrated by a release before the split of the migration sets (%s at %s)", migrations.LegacyTable, version(st.State.Legacy))
	}
	return fmt.Sprintf("schema_behind: %s %s and this binary needs %s migration %s (not applied: %s): "+
		"run `reservoir migrate --topology FILE up`, or `reservoir migrate --set %s --dsn DSN up` with DSN %s (docs/deploy.md); "+
		"this replica turns ready once it is applied",
		schemaSubject(st.Pod), at, set, version(st.State.Latest), versionList(st.State.Pending), set, field)
}

// schemaSubject names a database in a sentence.
func schemaSubject(pod string) string {
	if pod == "control" {
		return "the control database"
	}
	return "pod " + pod + "'s database"
}

// version formats a migration's version as `reservoir migrate` prints it.
func version(v int64) string { return fmt.Sprintf("%05d", v) }

func versionList(vs []int64) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = version(v)
	}
	return strings.Join(out, ", ")
}

// schemaHealth is st as /readyz shows it; the driver's error only with
// detail.
func schemaHealth(st cell.SchemaState, detail bool) wire.SchemaHealth {
	h := wire.SchemaHealth{Pod: st.Pod, Set: st.Set.Name(), Version: st.State.Current, Latest: st.State.Latest,
		Legacy: st.State.Legacy, Pending: st.State.Pending, Unknown: st.State.Unknown}
	switch {
	case st.Err != nil:
		h.State = failureClass(st.Err)
		if detail {
			h.Error = st.Err.Error()
		}
	case st.State.Behind():
		h.State = schemaBehind
	case st.State.Ahead():
		h.State = schemaAhead
	default:
		h.State = schemaCurrent
	}
	return h
}

// CheckSchema checks the control database's and every pod's schema
// against this binary's migrations now, as /readyz does (and refreshes
// what /readyz answers from). It returns nil when every database is
// current (or ahead), else a *SchemaError per database that is behind or
// could not be checked, joined: one that could not be reached is not a
// schema behind, and says so. A schema ahead of the binary is logged as a
// warning and is not an error. serve calls it at start, so the log says at
// once what the readiness probe will answer: the process keeps running
// either way, ready once every schema is migrated, each pod served while
// its database answers.
func (s *Server) CheckSchema(ctx context.Context) error {
	var errs []error
	for _, st := range s.schema().states(ctx, true) {
		switch {
		case st.Err != nil:
			errs = append(errs, &SchemaError{Pod: st.Pod, Class: failureClass(st.Err), Err: st.Err})
		case st.State.Behind():
			errs = append(errs, &SchemaError{Pod: st.Pod, Behind: true, Err: errors.New(schemaBehindReason(st))})
		}
	}
	return errors.Join(errs...)
}

// SchemaError is a database CheckSchema found behind this binary, or
// could not check: it did not answer, or refused the credentials, or its
// version could not be read.
type SchemaError struct {
	// Pod names the database's pod ("control" for the control database).
	Pod string
	// Behind: a migration this binary needs is not applied.
	Behind bool
	// Class is why the version could not be read ("unreachable",
	// "timeout", "auth_failed", "error"), when not Behind.
	Class string
	// Err is the schema_behind reason, or the driver's error.
	Err error
}

func (e *SchemaError) Error() string {
	if e.Behind {
		return e.Err.Error()
	}
	what, field := schemaSubject(e.Pod), "the topology's mysql_dsn of pod "+e.Pod
	if e.Pod == "control" {
		field = "the topology's control_dsn"
	}
	switch e.Class {
	case storeUnreachable:
		return fmt.Sprintf("cannot connect to %s (%s; check %s): %v", what, e.Class, field, e.Err)
	case storeTimeout:
		return fmt.Sprintf("%s did not answer in time (%s; check %s): %v", what, e.Class, field, e.Err)
	case storeAuthFailed:
		return fmt.Sprintf("%s refused the credentials of %s (%s): %v", what, field, e.Class, e.Err)
	}
	return fmt.Sprintf("the schema version of %s could not be read (%s): %v", what, e.Class, e.Err)
}

func (e *SchemaError) Unwrap() error { return e.Err }

// Connect reports whether the database could not be reached or refused
// the credentials: a connection problem, not a schema one.
func (e *SchemaError) Connect() bool {
	return !e.Behind && (e.Class == storeUnreachable || e.Class == storeTimeout || e.Class == storeAuthFailed)
}

const (
	// schemaTrust is how long /readyz reuses a check that found no
	// database behind and every version readable: probes come every few
	// seconds on every replica, and a schema does not move back unless a
	// database is restored.
	schemaTrust = 30 * time.Second
	// schemaRetry is how long it reuses one that found a database behind
	// or unreadable, so that a migration applied meanwhile turns the
	// replica ready within seconds.
	schemaRetry = 2 * time.Second
)

// schemaCheck caches a cell's schema states for /readyz: one query per
// database per schemaTrust while all is well, per schemaRetry while not.
// It logs a change of what is behind or ahead when it sees one, not at
// every check.
type schemaCheck struct {
	cell *cell.Cell
	log  *slog.Logger

	// mu is held through a check, so concurrent probes share one: the
	// others wait for it (within the first one's budget) and read its
	// result.
	mu      sync.Mutex
	last    []cell.SchemaState
	expires time.Time
	logged  string // what the last log line said, to log changes only
}

// states returns the cached states, or checks again when they are stale
// or force is set.
func (c *schemaCheck) states(ctx context.Context, force bool) []cell.SchemaState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !force && c.last != nil && time.Now().Before(c.expires) {
		return c.last
	}
	c.last = c.cell.Schema(ctx)
	ttl := schemaTrust
	for _, st := range c.last {
		if st.Err != nil || st.State.Behind() {
			ttl = schemaRetry
		}
	}
	c.expires = time.Now().Add(ttl)
	c.logChange()
	return c.last
}

// logChange logs what is behind, ahead or unreadable when it differs from
// the last check's.
func (c *schemaCheck) logChange() {
	var behind, ahead, unread []string
	for _, st := range c.last {
		switch {
		case st.Err != nil:
			unread = append(unread, st.Pod)
		case st.State.Behind():
			behind = append(behind, fmt.Sprintf("%s at %s migration %s (not applied: %s)", st.Pod, st.Set, version(st.State.Current), versionList(st.State.Pending)))
		case st.State.Ahead():
			ahead = append(ahead, fmt.Sprintf("%s at %s migration %s (unknown here: %s)", st.Pod, st.Set, version(st.State.Current), versionList(st.State.Unknown)))
		}
	}
	key := fmt.Sprint(behind, ahead, unread)
	if key == c.logged {
		return
	}
	first := c.logged == ""
	c.logged = key
	podLatest, controlLatest := version(migrations.Pod.Latest()), version(migrations.Control.Latest())
	if len(behind) > 0 {
		c.log.Warn("server: schema behind this binary: not ready until `reservoir migrate --topology FILE up` (or `--set SET --dsn DSN up` per database) migrates each database listed",
			"databases", behind, "pod_latest", podLatest, "control_latest", controlLatest)
	}
	if len(ahead) > 0 {
		c.log.Warn("server: schema ahead of this binary: a newer binary migrated these databases; this one keeps serving (a rolling deploy), but replace it with the newer one",
			"databases", ahead, "pod_latest", podLatest, "control_latest", controlLatest)
	}
	for _, st := range c.last {
		if st.Err == nil {
			continue
		}
		msg := "server: schema version could not be read"
		if e := (&SchemaError{Pod: st.Pod, Class: failureClass(st.Err)}); e.Connect() {
			msg = "server: cannot connect to a database to read its schema version (not a schema problem)"
		}
		c.log.Warn(msg, "pod", st.Pod, "reason", failureClass(st.Err), "err", st.Err)
	}
	if len(behind)+len(ahead)+len(unread) == 0 && !first {
		c.log.Info("server: schema current: every database has this binary's migrations of its set", "pod_latest", podLatest, "control_latest", controlLatest)
	}
}

// schema returns s's schema check.
func (s *Server) schema() *schemaCheck { return s.schemaCheck }

func (s *Server) metricsHandler() http.HandlerFunc {
	h := promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{
		Registry:          s.cfg.Registry,
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
	return h.ServeHTTP
}
