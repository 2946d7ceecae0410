package flagsource

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed31b0e981/reservoir/internal/controldb"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"

	flagd "github.com/open-feature/go-sdk-contrib/providers/flagd/pkg"
	"github.com/open-feature/go-sdk/openfeature"
	"github.com/open-feature/go-sdk/openfeature/isolated"

	isync "github.com/open-feature/flagd/core/pkg/sync"
)

// ErrFlagsNotLoaded is returned by Source.Decide, with RedisSafe, while
// no valid version of the flags has loaded from their source (a file,
// the control database or a flagd daemon: missing, unreachable, invalid
// or empty when the source started and not fixed yet) and after Close.
// ReadError and Rejected say why.
var ErrFlagsNotLoaded = errors.New("rollout: flags not loaded (no valid version from their source yet)")

// ErrVersionMismatch is wrapped by the error Source.Decide returns,
// with RedisSafe, when the two flags it evaluated report different
// versions twice in a row: the decision would belong to no single version
// of the flags. Once is a file replaced between the two evaluations, and
// Decide evaluates both again; twice in a row should not happen, since the
// source refuses a file whose flags disagree on the version.
var ErrVersionMismatch = errors.New("the flags report different versions")

// ErrUnknownVariant is wrapped by the error Source.Decide returns, with
// RedisSafe, when a flag answers a variant reservoir does not know.
var ErrUnknownVariant = errors.New("unknown variant")

// Config configures a Source.
type Config struct {
	// Path of the flags file (flagd's JSON format, docs/flags.md). Exactly
	// one of Path, DB, FlagdAddr and Provider is required. The file need
	// not exist, or be readable, when the source starts: the source then
	// starts not loaded and loads the file when it can.
	Path string
	// DB is the control database whose rollout_flags document (FlagsTable)
	// the source follows instead of a file: the flag plane of a fleet on
	// many hosts. As with a file, a database unreachable or without a
	// document at start leaves the source not loaded until it can read
	// one, and one unreachable later leaves the last valid flags in force.
	DB *sql.DB
	// FlagdAddr is a flagd daemon's gRPC sync service (host:port, e.g.
	// "flagd:8015") that the source follows instead of a file: the daemon
	// reads the flags wherever it is set up to, and pushes every version to
	// each replica over a SyncFlags stream. Plaintext unless FlagdTLS. As
	// with a file, a daemon down at start leaves the source not loaded
	// until it answers, and a stream that breaks later leaves the last
	// valid flags in force while the source reconnects.
	FlagdAddr string
	// FlagdTLS makes the connection to FlagdAddr TLS (1.2 or later), the
	// daemon's certificate verified against FlagdCAFile or the system's
	// roots, for the host of FlagdAddr. Needs FlagdAddr.
	FlagdTLS bool
	// FlagdCAFile is a CA file (PEM) to verify the daemon against. Needs
	// FlagdTLS. Read when the source starts: one that cannot be read
	// fails New.
	FlagdCAFile string
	// FlagdSelector is sent as the selector of every sync request, so the
	// daemon serves only the flags of one of its sources (flagd selects by
	// the source's URI). Each document it sends is still checked whole.
	// Needs FlagdAddr. Empty: every flag the daemon serves.
	FlagdSelector string
	// Provider is any OpenFeature provider to evaluate the flags through
	// instead of flagd's in-process one: the source then neither reads nor
	// checks a document, and is loaded once the provider reports ready
	// (docs/flags.md says what the provider must answer). The source owns
	// it from then on: Close shuts it down. reservoir cannot write its
	// flags: beside it, Kills follows reservoir's own kill switch.
	Provider openfeature.FeatureProvider
	// Kills is the control database whose kill switch document
	// (flagdoc.KillTable) the source follows beside FlagdAddr or Provider,
	// whose flags reservoir does not write: the kill switch engaged there
	// wins over the mode and kill switch the daemon or provider answers,
	// and each decision's Version is the epoch of both (Epoch). It is
	// polled as DB is (20ms); no document there means no switch engaged.
	// Not allowed with Path or DB: that document carries the kill switch
	// itself, and reservoir writes it.
	Kills *sql.DB
	// Logger receives loads, reloads, rejected files and evaluation
	// problems. Default: slog.Default().
	Logger *slog.Logger
	// LoadTimeout bounds loading the file into a provider, at start and on
	// every reload. Default: 2s.
	LoadTimeout time.Duration
	// PollInterval is how often the file is also checked by stat, for a
	// change the directory watch did not report (a filesystem without
	// inotify, an overflowed event queue), or the database's document
	// version is read. Default: 1s for a file, 20ms for the database (a
	// change reaches every replica within it). Unused with FlagdAddr (the
	// daemon pushes) and Provider.
	PollInterval time.Duration
	// VersionEvery is how old an answer of AppliedVersion may be: the
	// heartbeat asks every few milliseconds, and the handoff sweepers
	// every 100ms, which costs nothing in process but is a request each
	// to a remote provider (an OFREP service). Default: 100ms with a
	// Provider, 0 (always evaluated) otherwise. Decide is never cached.
	VersionEvery time.Duration
	// LogEvery limits evaluation problems (unknown variants, missing flags,
	// evaluation errors) to one log line per problem per LogEvery, with the
	// number suppressed. Default: 10s.
	LogEvery time.Duration

	// killDoc makes DB's row the kill switch document (the source Kills
	// starts), not the flags document.
	killDoc bool
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.LoadTimeout == 0 {
		c.LoadTimeout = 2 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
		if c.DB != nil {
			c.PollInterval = 20 * time.Millisecond
		}
	}
	if c.LogEvery == 0 {
		c.LogEvery = 10 * time.Second
	}
	if c.VersionEvery == 0 && c.Provider != nil {
		c.VersionEvery = 100 * time.Millisecond
	}
	return c
}

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	var errs []error
	given := 0
	for _, set := range []bool{c.Path != "", c.DB != nil, c.FlagdAddr != "", c.Provider != nil} {
		if set {
			given++
		}
	}
	if given != 1 {
		errs = append(errs, errors.New("rollout: give exactly one of Config.Path (a flags file, e.g. deploy/flags/reservoir.flagd.json), "+
			"Config.DB (the control database), Config.FlagdAddr (a flagd daemon's sync service) and Config.Provider (an OpenFeature provider)"))
	}
	if c.Kills != nil && (c.Path != "" || c.DB != nil) {
		errs = append(errs, errors.New("rollout: Config.Kills is for Config.FlagdAddr or Config.Provider, whose flags reservoir does not write; "+
			"a flags file's or the control database's document carries the kill switch itself"))
	}
	if c.FlagdAddr != "" {
		if err := CheckFlagdAddr(c.FlagdAddr); err != nil {
			errs = append(errs, fmt.Errorf("rollout: Config.FlagdAddr %w", err))
		}
	}
	if c.FlagdAddr == "" && (c.FlagdTLS || c.FlagdCAFile != "" || c.FlagdSelector != "") {
		errs = append(errs, errors.New("rollout: Config.FlagdTLS, FlagdCAFile and FlagdSelector need Config.FlagdAddr"))
	}
	if c.FlagdCAFile != "" && !c.FlagdTLS {
		errs = append(errs, errors.New("rollout: Config.FlagdCAFile needs Config.FlagdTLS"))
	}
	if c.LoadTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("rollout: Config.LoadTimeout %v must be at least 1ms", c.LoadTimeout))
	}
	if c.PollInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("rollout: Config.PollInterval %v must be at least 1ms", c.PollInterval))
	}
	if c.LogEvery < 0 {
		errs = append(errs, fmt.Errorf("rollout: Config.LogEvery %v must not be negative", c.LogEvery))
	}
	return errors.Join(errs...)
}

// Source is the ModeSource of production: it evaluates FlagMode and
// FlagKillSwitch from a flags file through OpenFeature and flagd's
// in-process provider, with an evaluation context whose targeting key is
// the shop id (decimal) and whose attributes are "pod" (string) and "shop"
// (number). The decision's Version is the metadata.version flagd returns
// with each of the two evaluations, so it is the version of the very
// variants evaluated.
//
// The file reaches flagd through the source's own watch of the file's
// directory (see fileFeed), not flagd's file watch: a rename over the file
// applies in milliseconds, and so does a save by an editor that renames the
// original away or a delete and recreate, which flagd's watch loses for
// good. Each version is checked with flagd's own parser, and for flags
// that agree on a metadata.version above the one in force (checkFlags),
// before it is applied. The control
// database (DB, see dbFeed) and a flagd daemon (FlagdAddr, see grpcFeed)
// feed flagd the same way, checked the same way; a Provider replaces flagd
// and is taken as it answers (docs/flags.md, "Where the flags come from").
//
// Safety rules (an error always comes with RedisSafe, which the caller
// must not act on: a replica in doubt about its flags serves nothing,
// docs/ownership.md section 7):
//   - A file without metadata.version (one without the flags included:
//     they carry it) is invalid, and so is one whose version is not above
//     the version in force (lower, or the same with other content):
//     decisions at version 0 could never hand a shop off, and a version
//     that does not grow is stale to the stores' fences. A Provider that
//     lacks a flag answers its code default, without an error.
//   - A variant reservoir does not know, an evaluation error, or a version
//     that is not a whole number answers an error (logged, rate-limited).
//   - A file that is missing, unreadable or invalid (empty included) when
//     the source starts answers ErrFlagsNotLoaded until it can be loaded;
//     the source watches for it meanwhile.
//   - A file that becomes invalid later (one whose flags disagree on the
//     version, or whose version does not grow, included) is rejected
//     (logged, and reported by Rejected) and the last valid flags stay
//     in effect: a broken edit does not flip the fleet, and a mysql_only
//     scope is not sent back to a Redis that lacks its data. The same holds
//     for a file that becomes unreadable or is deleted.
//
// Each Source has its own OpenFeature API instance, so several in one
// process (tests, or one per pod) are independent. Safe for concurrent
// use; Close stops it.
type Source struct {
	cfg     Config
	log     *slog.Logger
	limiter *logLimiter
	feed    feed
	api     *openfeature.EvaluationAPI
	client  *openfeature.Client

	// wasReady is set once a Provider (no feed) reported ready.
	wasReady atomic.Bool

	// kills follows the kill switch document (Config.Kills); nil without.
	kills *Source

	// The last AppliedVersion and when it was evaluated (VersionEvery).
	versionMu sync.Mutex
	versionAt time.Time
	version   int64
	versionOK bool

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ authority.ModeSource = (*Source)(nil)

// feed is where a Source's flags come from: a file (fileFeed), the
// control database (dbFeed) or a flagd daemon (grpcFeed). Each passes flagd
// only versions that its parser accepted.
type feed interface {
	isync.ISync
	// prime reads the flags once before the provider starts.
	prime()
	// isLoaded reports whether a valid version was passed on.
	isLoaded() bool
	// source names it for flagd and the logs.
	source() string
}

// New loads the flags file and starts watching it. It fails when
// the config is invalid, the provider cannot start, or ctx ends first. A
// file that is missing, unreadable or invalid does not fail it: the problem
// is logged, Decide answers ErrFlagsNotLoaded, and the file is loaded as
// soon as it appears, becomes readable or is fixed (see Loaded).
func New(ctx context.Context, cfg Config) (*Source, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Source{limiter: newLogLimiter(cfg.LogEvery), cfg: cfg}
	if cfg.Kills != nil {
		kc := Config{DB: cfg.Kills, killDoc: true, Logger: cfg.Logger.With("document", "kill switch"), LoadTimeout: cfg.LoadTimeout, LogEvery: cfg.LogEvery}
		k, err := New(ctx, kc)
		if err != nil {
			return nil, fmt.Errorf("rollout: the kill switch document: %w", err)
		}
		s.kills = k
	}
	src, err := s.start(ctx)
	if err != nil && s.kills != nil {
		if cerr := s.kills.Close(); cerr != nil {
			s.log.Warn("rollout: kill switch source did not shut down", "err", cerr)
		}
	}
	return src, err
}

// start starts the source's own feed and provider (New starts the kill
// switch's first).
func (s *Source) start(ctx context.Context) (*Source, error) {
	cfg := s.cfg
	if cfg.Provider != nil {
		return s.startProvider(ctx)
	}
	if cfg.FlagdAddr != "" {
		s.log = cfg.Logger.With("flags", "flagd "+cfg.FlagdAddr)
		if cfg.FlagdTLS {
			s.log = s.log.With("tls", true)
		}
		if cfg.FlagdSelector != "" {
			s.log = s.log.With("selector", cfg.FlagdSelector)
		}
		f, err := newGRPCFeed(cfg, s.log, s.problem)
		if err != nil {
			return nil, err
		}
		s.feed = f
	} else if cfg.DB != nil {
		doc := controldb.FlagsDoc
		if cfg.killDoc {
			doc = controldb.KillDoc
		}
		s.log = cfg.Logger.With("flags", "control database")
		s.feed = newDBFeed(cfg.DB, doc, cfg.PollInterval, cfg.LoadTimeout, s.log, s.problem)
	} else {
		s.log = cfg.Logger.With("flags_file", cfg.Path)
		s.feed = newFileFeed(cfg.Path, cfg.PollInterval, s.log, s.problem)
	}
	s.feed.prime()

	provider, err := flagd.NewProvider(
		flagd.WithInProcessResolver(),
		flagd.WithOfflineFilePath(""), // FLAGD_OFFLINE_FLAG_SOURCE_PATH would switch to flagd's own file watch
		flagd.WithCustomSyncProviderAndUri(s.feed, s.feed.source()),
		flagd.WithDeadline(int(cfg.LoadTimeout/time.Millisecond)),
	)
	if err != nil {
		return nil, fmt.Errorf("rollout: flagd provider: %w", err)
	}
	s.api = isolated.NewAPI()
	// The feed only passes on versions flagd's parser accepted, so the
	// provider should never report one; if it does, say so.
	rejected := func(d openfeature.EventDetails) {
		s.log.Error("rollout: flagd rejected the flags file; keeping the last valid flags", "err", d.Message)
	}
	s.api.AddHandler(openfeature.ProviderError, &rejected)
	lctx, cancel := context.WithTimeout(ctx, cfg.LoadTimeout)
	defer cancel()
	if err := s.api.SetProviderAndWait(lctx, provider); err != nil {
		if serr := s.shutdown(); serr != nil {
			s.log.Warn("rollout: flags provider did not shut down", "err", serr)
		}
		return nil, fmt.Errorf("rollout: start flags provider for %s: %w", s.feed.source(), err)
	}
	s.client = s.api.NewClient()
	return s, nil
}

// Loaded reports whether a valid version of the flags file is in effect
// (false while a file that was missing, unreadable or invalid at start
// cannot be loaded, and after Close). A replica whose source is not loaded
// is not ready (docs/flags.md). It is the source's own state: the SDK's
// provider state is no guide (with flagd's own file watch it stays ERROR
// for good after one rejected file), except with a Provider, whose state
// is all there is (see providerLoaded).
func (s *Source) Loaded() bool {
	return s.loaded() && !s.closed.Load() && (s.kills == nil || s.kills.Loaded())
}

// AppliedVersion is the version of the flags this source answers with now
// (what Decide reports: with Config.Kills, the epoch of the provider's
// version and the kill switch document's), and false while none is
// loaded: what the handoff sweeper hands shops off for. With a Provider
// the answer may be up to VersionEvery old (see Config).
func (s *Source) AppliedVersion(ctx context.Context) (int64, bool) {
	if !s.Loaded() {
		return 0, false
	}
	if s.cfg.VersionEvery <= 0 {
		return s.appliedVersion(ctx)
	}
	s.versionMu.Lock()
	defer s.versionMu.Unlock()
	if now := time.Now(); now.Sub(s.versionAt) >= s.cfg.VersionEvery {
		s.version, s.versionOK = s.appliedVersion(ctx)
		s.versionAt = now
	}
	return s.version, s.versionOK
}

// appliedVersion is AppliedVersion evaluated now.
func (s *Source) appliedVersion(ctx context.Context) (int64, bool) {
	e, err := s.evaluate(ctx, flagdoc.FlagKillSwitch, string(authority.KillOff), rootContext(), "", 0)
	if err != nil {
		return 0, false
	}
	if s.kills == nil {
		return e.version, true
	}
	k, err := s.kills.killAt(ctx, rootContext(), "", 0)
	if err != nil {
		return 0, false
	}
	epoch, err := Epoch(e.version, k.version)
	return epoch, err == nil
}

// poller is a feed that reads its document on a schedule (dbFeed), and
// can be asked to read it at once.
type poller interface{ pollNow() }

// PollNow makes the source read the control database's flags, and the
// kill switch document with Config.Kills, at once instead of at the next
// poll (Config.PollInterval): the replica whose controller just wrote a
// change obeys it one round trip later, where it would wait up to a
// poll interval (ControllerConfig.Wrote). A source fed by a file or a
// flagd daemon is told of a change by its feed: there it does nothing.
func (s *Source) PollNow() {
	if p, ok := s.feed.(poller); ok {
		p.pollNow()
	}
	if s.kills != nil {
		s.kills.PollNow()
	}
}

// Decide implements ModeSource: two flag evaluations (mode and kill
// switch) for the shop of the pod, and the version both report. It never
// fails open: every problem answers RedisSafe with an error (the caller
// must not act on it): ErrFlagsNotLoaded before a valid file has loaded
// and after Close, an error wrapping ErrUnknownVariant for a variant
// reservoir does not know, one wrapping ErrVersionMismatch when the two
// flags report different versions twice in a row, and an evaluation error
// otherwise.
func (s *Source) Decide(ctx context.Context, pod string, shop int64) (authority.Decision, error) {
	if s.closed.Load() {
		return authority.RedisSafe, ErrFlagsNotLoaded
	}
	if !s.loaded() {
		s.problem("not-loaded", slog.LevelError, "rollout: flags not loaded; no decision until they are")
		return authority.RedisSafe, ErrFlagsNotLoaded
	}
	ec := openfeature.NewEvaluationContext(shopKey(shop), map[string]any{"pod": pod, "shop": shop})
	d, err := s.decideOwn(ctx, ec, pod, shop)
	if err != nil || s.kills == nil {
		return d, err
	}
	return s.withKills(ctx, d, ec, pod, shop)
}

// decideOwn is Decide from the source's own flags, without the kill
// switch document of Config.Kills.
func (s *Source) decideOwn(ctx context.Context, ec openfeature.EvaluationContext, pod string, shop int64) (authority.Decision, error) {
	var mode, kill evaluation
	for attempt := 1; ; attempt++ {
		var merr, kerr error
		mode, merr = s.evaluate(ctx, flagdoc.FlagMode, string(authority.ModeRedis), ec, pod, shop)
		kill, kerr = s.evaluate(ctx, flagdoc.FlagKillSwitch, string(authority.KillOff), ec, pod, shop)
		if err := errors.Join(merr, kerr); err != nil {
			return authority.RedisSafe, err
		}
		if mode.version == kill.version {
			break
		}
		// A new version of the file landed between the two evaluations:
		// both again, from the version now in effect.
		if attempt == 2 {
			s.problem("version-mismatch", slog.LevelError, "rollout: the flags report different versions; no decision",
				"pod", pod, "shop", shop, "mode_version", mode.version, "kill_switch_version", kill.version)
			return authority.RedisSafe, fmt.Errorf("rollout: pod %s shop %d: %s version %d, %s version %d: %w",
				pod, shop, flagdoc.FlagMode, mode.version, flagdoc.FlagKillSwitch, kill.version, ErrVersionMismatch)
		}
	}
	d := authority.Decision{Mode: authority.Mode(mode.value), Kill: authority.Kill(kill.value), Version: mode.version}
	if !d.Mode.Valid() {
		return authority.RedisSafe, s.unknown(flagdoc.FlagMode, mode.value, names(authority.Modes), pod, shop)
	}
	if !d.Kill.Valid() {
		return authority.RedisSafe, s.unknown(flagdoc.FlagKillSwitch, kill.value, names(authority.Kills), pod, shop)
	}
	return d, nil
}

// evaluation is one flag's variant and the version of the flags it came
// from.
type evaluation struct {
	value   string
	version int64
}

func (s *Source) evaluate(ctx context.Context, key, def string, ec openfeature.EvaluationContext, pod string, shop int64) (evaluation, error) {
	det, err := s.client.StringValueDetails(ctx, key, def, ec)
	if err != nil {
		if det.ErrorCode == openfeature.FlagNotFoundCode {
			// A provider without the flag means its code default, which
			// is the Redis-safe value by design: not an error. (A flags
			// document cannot lack it: the flags carry the version, and
			// the feeds refuse a document without one.)
			s.problem(key+"/missing", slog.LevelWarn, "rollout: flag missing from the flags file; using its code default",
				"flag", key, "default", def)
			return evaluation{value: def}, nil
		}
		s.problem(key+"/"+string(det.ErrorCode), slog.LevelError, "rollout: flag evaluation failed; no decision",
			"flag", key, "pod", pod, "shop", shop, "err", err)
		return evaluation{}, fmt.Errorf("rollout: evaluate %s for pod %s shop %d: %w", key, pod, shop, err)
	}
	v, verr := flagdoc.VersionOf(det.FlagMetadata[flagdoc.MetaVersion])
	if verr != nil {
		s.problem(key+"/version", slog.LevelError, "rollout: flag version unreadable; no decision",
			"flag", key, "pod", pod, "shop", shop, "err", verr)
		return evaluation{}, fmt.Errorf("rollout: evaluate %s for pod %s shop %d: metadata.version: %w", key, pod, shop, verr)
	}
	return evaluation{value: det.Value, version: v}, nil
}

func (s *Source) unknown(key, variant string, known []string, pod string, shop int64) error {
	s.problem(key+"/variant/"+variant, slog.LevelError, "rollout: flag answered an unknown variant; no decision",
		"flag", key, "variant", variant, "want", strings.Join(known, ", "), "pod", pod, "shop", shop)
	return fmt.Errorf("rollout: flag %s answered %q for pod %s shop %d: %w (want %s)",
		key, variant, pod, shop, ErrUnknownVariant, strings.Join(known, ", "))
}

// problem logs at most one line per key per LogEvery.
func (s *Source) problem(key string, level slog.Level, msg string, args ...any) {
	ok, suppressed := s.limiter.allow(key, time.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	s.log.Log(context.Background(), level, msg, args...)
}

// Close stops watching the file and shuts the provider down, waiting up to
// LoadTimeout for it. Decide answers ErrFlagsNotLoaded afterwards. Calling Close again returns the first result.
func (s *Source) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.closeErr = s.shutdown()
		if s.kills != nil {
			s.closeErr = errors.Join(s.closeErr, s.kills.Close())
		}
	})
	return s.closeErr
}

// shutdown shuts the API (provider, feed, watcher) down, waiting at most
// LoadTimeout: the SDK's shutdown has no deadline of its own.
func (s *Source) shutdown() error {
	done := make(chan error, 1)
	go func() { done <- s.api.Shutdown(context.Background()) }()
	select {
	case err := <-done:
		return err
	case <-time.After(s.cfg.LoadTimeout):
		return fmt.Errorf("rollout: flags provider shutdown still running after %v", s.cfg.LoadTimeout)
	}
}

// logLimiter lets one line per key through per interval and counts the
// rest.
type logLimiter struct {
	every time.Duration
	mu    sync.Mutex
	seen  map[string]*limitEntry
}

type limitEntry struct {
	last       time.Time
	suppressed int
}

// maxLimitKeys bounds the limiter's memory: keys come partly from the
// flags file (variant names).
const maxLimitKeys = 256

func newLogLimiter(every time.Duration) *logLimiter {
	return &logLimiter{every: every, seen: map[string]*limitEntry{}}
}

func (l *logLimiter) allow(key string, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.seen[key]
	if e == nil {
		if len(l.seen) >= maxLimitKeys {
			clear(l.seen)
		}
		l.seen[key] = &limitEntry{last: now}
		return true, 0
	}
	if now.Sub(e.last) < l.every {
		e.suppressed++
		return false, 0
	}
	suppressed = e.suppressed
	e.last, e.suppressed = now, 0
	return true, suppressed
}

// names lists values as strings, for messages.
func names[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}
