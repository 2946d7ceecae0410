package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/internal/telemetry"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/rollout"
)

// newLogger builds the process logger on w: JSON (for log pipelines) or
// text (for people).
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level must be debug, info, warn or error, got %q", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, oneOf("log-format", format, "json", "text")
}

// minAdminToken is the shortest admin token serve accepts (as the server
// does).
const minAdminToken = 16

// adminToken reads the admin token: the content of --admin-token-file,
// else the value of $RESERVOIR_ADMIN_TOKEN (the token itself, not a
// path). A token is never taken from the command line, where any user of
// the host could read it in the process list. One shorter than 16 bytes
// is a usage error naming where it came from.
func adminToken(file string) (string, error) {
	token, from := os.Getenv(adminTokenEnv), "$"+adminTokenEnv+" (the token itself)"
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--admin-token-file: %w", err)
		}
		token, from = strings.TrimSpace(string(b)), "--admin-token-file "+file
	}
	if token != "" && len(token) < minAdminToken {
		return "", usagef("the admin token in %s is %d bytes: it must be at least %d (e.g. `openssl rand -hex 32`), or none to disable the admin API",
			from, len(token), minAdminToken)
	}
	return token, nil
}

// adminTokenEnv holds the admin token itself, when --admin-token-file is
// not given.
const adminTokenEnv = "RESERVOIR_ADMIN_TOKEN"

// logSchemaCheck logs what serve's schema check at start found (err is
// CheckSchema's): each database it could not reach as the connection
// problem it is (its pod is degraded, the others are served), apart from
// each one behind this binary (this replica is not ready until it is
// migrated).
func logSchemaCheck(log *slog.Logger, err error) {
	if err == nil {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var se *server.SchemaError
		switch {
		case errors.As(e, &se) && se.Behind:
			log.Error("serve: a database's schema is behind this binary: not ready until it is migrated (/readyz says the same)", "err", e)
		case errors.As(e, &se) && se.Connect():
			what := "its pod is degraded until it answers, the other pods are served"
			if se.Pod == "control" {
				what = "this replica serves on the flags it has; they cannot be changed until it answers"
			}
			log.Error("serve: cannot connect to a database at start (not a schema problem): "+what+"; its schema is checked once it answers (/readyz)",
				"pod", se.Pod, "reason", se.Class, "err", e)
		default:
			log.Error("serve: a database's schema version could not be read at start (/readyz says what it means for this replica)", "err", e)
		}
	}
}

// loadClients reads the checkout API's clients: the file, else the
// content of $RESERVOIR_CLIENTS. Without either, serve refuses to start
// unless --insecure-no-auth says to serve anyone.
func loadClients(file string, noAuth bool) (*server.Clients, error) {
	env := os.Getenv(server.ClientsFromEnv)
	switch {
	case noAuth && (file != "" || env != ""):
		return nil, errors.New("--insecure-no-auth and --clients (or $RESERVOIR_CLIENTS) are exclusive")
	case noAuth:
		return nil, nil
	case file != "":
		c, err := server.LoadClients(file)
		if err != nil {
			return nil, fmt.Errorf("--clients: %w", err)
		}
		return c, nil
	case env != "":
		c, err := server.ParseClients([]byte(env))
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", server.ClientsFromEnv, err)
		}
		return c, nil
	}
	return nil, errors.New("--clients is required: the checkout API's client tokens (make one with `reservoir clients new`; " +
		"or give the file's content in $RESERVOIR_CLIENTS); --insecure-no-auth serves anyone, for development only")
}

// loadOperators reads the admin API's operators: the file, else the
// content of $RESERVOIR_OPERATORS; neither is none (nil), and the shared
// admin token, if any, is then the only admin identity.
func loadOperators(file string) (*server.Operators, error) {
	env := os.Getenv(server.OperatorsFromEnv)
	switch {
	case file != "":
		o, err := server.LoadOperators(file)
		if err != nil {
			return nil, fmt.Errorf("--operators: %w", err)
		}
		return o, nil
	case env != "":
		o, err := server.ParseOperators([]byte(env))
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", server.OperatorsFromEnv, err)
		}
		return o, nil
	}
	return nil, nil
}

// reloadOnHangup reloads srv's credentials on each SIGHUP until ctx ends:
// the way to apply a changed file when its directory cannot be watched,
// or to apply it at once.
func reloadOnHangup(ctx context.Context, srv *server.Server) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = srv.ReloadCredentials("SIGHUP") // logged and counted there
			}
		}
	}()
}

func runServe(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("serve", "serve [--topology FILE] [--addr HOST:PORT] [--admin-addr HOST:PORT] [--clients FILE] [--operators FILE] [--admin-token-file FILE] [flags]", out)
	topoPath := topologyFlag(fs)
	addr := fs.String("addr", "127.0.0.1:8080", "the checkout API's listen address, `HOST:PORT` (/v1)")
	adminAddr := fs.String("admin-addr", "127.0.0.1:8081", "the admin listener's address, `HOST:PORT`: admin API, dashboard, /metrics, /healthz, /readyz")
	clientsFile := envString(fs, "clients", "RESERVOIR_CLIENTS_FILE", "the checkout API's clients `FILE` (else the file's content in $RESERVOIR_CLIENTS); make entries with reservoir clients new")
	noAuth := fs.Bool("insecure-no-auth", false, "serve the checkout API to anyone who reaches it, without client tokens (development only)")
	operatorsFile := envString(fs, "operators", "RESERVOIR_OPERATORS_FILE", "the admin API's operators `FILE`: a name, a token digest and a role each (else the file's content in $RESERVOIR_OPERATORS); make entries with reservoir operators new")
	tokenFile := fs.String("admin-token-file", "", "`FILE` holding the shared admin token, at least 16 bytes: identity admin-token, role admin, beside the operators (without it: the token itself in $RESERVOIR_ADMIN_TOKEN; no token and no operators: admin API disabled)")
	shutdown := fs.Duration("shutdown-timeout", 15*time.Second, "on SIGTERM/Ctrl-C, how long requests in flight may take to finish")
	drain := fs.Duration("drain-timeout", 10*time.Second, "then, how long shadow calls and the comparer's last flush may take")
	maxConns := fs.Int("max-conns", 0, "checkout connections kept open at most; more wait unread (0: 32 per CPU, and at least the pods' slots; -1: no cap)")
	logFormat := fs.String("log-format", "json", "log `FORMAT`: json or text")
	logLevel := fs.String("log-level", "info", "log `LEVEL`: debug, info, warn or error")
	verbose := verboseFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := requireTopology(*topoPath); err != nil {
		return err
	}
	if *maxConns < -1 {
		return usagef("--max-conns must be -1 (no cap), 0 (the default) or a number of connections, got %d", *maxConns)
	}
	log, err := newLogger(errOut, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	// Tracing is off unless OTEL_TRACES_EXPORTER asks for an exporter
	// (docs/tracing.md). A line logged inside a traced request carries
	// its trace id either way.
	log = telemetry.Logger(log)
	tracing, err := telemetry.Setup(ctx, telemetry.Config{Version: Version, Console: errOut})
	if err != nil {
		return err
	}
	defer func() {
		// After the cell closed: the shadow calls it drained ended their
		// spans. Bounded: a collector that does not answer must not hold
		// the process up.
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(fctx); err != nil {
			log.Warn("serve: flush traces", "err", err)
		}
	}()
	if tracing.Enabled() {
		log.Info("serve: tracing on", "exporter", tracing.Exporter)
	}
	if *verbose {
		showLibraryLogs(errOut) // the server's own log is --log-level's
	}
	token, err := adminToken(*tokenFile)
	if err != nil {
		return err
	}
	clients, err := loadClients(*clientsFile, *noAuth)
	if err != nil {
		return err
	}
	operators, err := loadOperators(*operatorsFile)
	if err != nil {
		return err
	}
	if err := server.CheckAdminIdentities(operators, token); err != nil {
		return usagef("%v (--operators or $%s, and --admin-token-file or $%s)", err, server.OperatorsFromEnv, adminTokenEnv)
	}
	topo, err := topology.Load(*topoPath)
	if err != nil {
		return err
	}
	reg := server.NewRegistry()
	// A flags file that is missing or unreadable does not stop the start:
	// the replica serves, is not ready and answers reservation calls 503
	// flags_unavailable until a valid file is in place (it watches it).
	provider, err := flagsProvider(ctx, topo, *topoPath)
	if err != nil {
		return err
	}
	c, err := cell.Open(ctx, cell.Config{Topology: topo, Registerer: reg, Logger: log, Heartbeat: true, Provider: provider})
	if err != nil {
		return err
	}
	closeCell := func() error {
		dctx, cancel := context.WithTimeout(context.Background(), *drain)
		defer cancel()
		return c.Close(dctx)
	}
	var ctl *rollout.Controller
	if topo.PlanFile != "" {
		plan, err := loadPlan(topo.PlanFile, *topoPath, topo)
		if err == nil {
			ctl, err = rollout.NewController(rollout.ControllerConfig{DB: c.Control, Flags: c.FlagStore(), Plan: plan, Pods: topo.PodNames(),
				Stats: c.Comparer, Reconciler: c.Reconciler, Lag: c, Handoffs: c, Stores: c, InForce: c.Flags.InForce, Wrote: c.Flags.PollNow, Modes: c.Modes()})
		}
		if err != nil {
			return errors.Join(err, closeCell())
		}
	}
	files := server.CredentialFiles{Operators: *operatorsFile, AdminToken: *tokenFile}
	if !*noAuth {
		files.Clients = *clientsFile
	}
	srv, err := server.New(server.Config{Cell: c, Controller: ctl, Reconciler: server.ReportFunc(c.Reconcile), Clients: clients, InsecureNoAuth: *noAuth,
		Operators: operators, AdminToken: token, CredentialFiles: files, Registry: reg, Logger: log, ShutdownTimeout: *shutdown, MaxConns: *maxConns,
		Tracing: tracing.Enabled()})
	if err != nil {
		return errors.Join(err, closeCell())
	}
	defer srv.Close()
	// Credentials files are reread on change and on SIGHUP: a token
	// rotated or an operator added needs no restart.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		if err := srv.WatchCredentials(wctx); err != nil {
			log.Warn("serve: credentials files are not watched: send SIGHUP to reload them", "err", err)
		}
	}()
	reloadOnHangup(wctx, srv)
	// A schema behind the binary does not stop the start: the replica is
	// not ready (/readyz names `reservoir migrate`) until it is migrated.
	// Nor does a database that does not answer: its pod is degraded
	// (/readyz) and the others are served. The check is bounded, so a
	// database that hangs cannot keep the replica from listening.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	logSchemaCheck(log, srv.CheckSchema(sctx))
	cancel()
	switch {
	case token == "" && operators == nil:
		log.Warn("serve: no operators (--operators or $RESERVOIR_OPERATORS) and no admin token ($RESERVOIR_ADMIN_TOKEN or --admin-token-file): the admin API and the dashboard's data are disabled")
	case token != "" && operators != nil:
		log.Warn("serve: the shared admin token is accepted beside the operators, as identity " + server.LegacyAdminName +
			" (role admin, actor from X-Reservoir-Actor): drop it once every operator has their own token")
	}
	if *noAuth {
		log.Warn("serve: --insecure-no-auth: the checkout API serves anyone who reaches it; never run this in production")
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return errors.Join(fmt.Errorf("--addr: listen: %w", err), closeCell())
	}
	adminLn, err := net.Listen("tcp", *adminAddr)
	if err != nil {
		return errors.Join(fmt.Errorf("--admin-addr: listen: %w", err), ln.Close(), closeCell())
	}
	fmt.Fprintf(out, "reservoir serve: listening on http://%s (checkout API; pods %s); admin on http://%s (dashboard http://%s/dashboard, /metrics, /healthz, /readyz)\n",
		ln.Addr(), strings.Join(topo.PodNames(), ", "), adminLn.Addr(), adminLn.Addr())
	log.Info("serve: listening", "addr", ln.Addr().String(), "admin_addr", adminLn.Addr().String(), "pods", topo.PodNames(),
		"plan", topo.PlanFile != "", "admin", token != "" || operators != nil, "operators", operators.Names(), "shared_admin_token", token != "", "auth", !*noAuth)
	serr := srv.Serve(ctx, ln, adminLn)
	cerr := closeCell()
	if cerr == nil {
		log.Info("serve: stopped cleanly")
	}
	return errors.Join(serr, cerr)
}
