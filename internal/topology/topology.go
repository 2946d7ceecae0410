// Package topology reads the deployment map: which pods exist, each pod's
// MySQL and Redis (and how to authenticate to them and verify them), which
// pod serves which shop, and the shared control database and flags file.
// Every reservoir replica reads the same file, so replicas stay stateless
// and agree on routing.
//
// Secrets need not be in the file: the fields that can hold one
// (control_dsn, mysql_dsn, redis_username, redis_password) may take them
// from the environment (${NAME}) or a file (file:PATH) instead; see
// docs/secrets.md. Parse resolves them and never puts a resolved value, or
// the text around a reference, into an error. The package opens no
// connection: that is internal/cell's.
package topology

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/seed31b0e981/reservoir/internal/tomlstrict"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// Config is a topology file.
type Config struct {
	// ControlDSN is the database holding the comparer's stats and diffs,
	// the rollout state and audit, and (flags_source = "database") the
	// flags document and the replicas' heartbeats (a go-sql-driver/mysql
	// DSN). Required. A secret field: it may use ${ENV} or file:PATH.
	ControlDSN string `toml:"control_dsn"`
	// ControlTLSCA is a CA file (PEM): the control database is reached
	// over TLS and its certificate verified against it. Empty: as
	// ControlDSN says (tls=true there verifies against the system's roots).
	ControlTLSCA string `toml:"control_tls_ca"`
	// FlagsSource is where the flags every replica follows live: "file"
	// (FlagsFile, watched by the replicas of one host or a shared volume),
	// "database" (the control database's rollout_flags document, polled
	// by every replica of a fleet on any number of hosts), "flagd" (a
	// flagd daemon at FlagdAddr pushes them to every replica; reservoir
	// cannot change them there), "ofrep" (every evaluation is asked of an
	// OFREP service at OFREPURL) or "provider" (the program that runs
	// serve supplies an OpenFeature provider: package reservoirmain).
	// Default: "file".
	FlagsSource string `toml:"flags_source"`
	// FlagsFile is the flagd flags file every replica watches. Required
	// with flags_source "file".
	FlagsFile string `toml:"flags_file"`
	// FlagdAddr is the flagd daemon's gRPC sync service, host:port
	// (TLS with FlagdTLS). Required with flags_source
	// "flagd", refused otherwise.
	FlagdAddr string `toml:"flagd_addr"`
	// FlagdTLS makes the connection to the flagd daemon TLS, the daemon
	// verified against FlagdCAFile or the system's roots. Needs
	// flags_source "flagd". Default: false (plaintext).
	FlagdTLS bool `toml:"flagd_tls"`
	// FlagdCAFile is a CA file (PEM) to verify the flagd daemon against.
	// Needs FlagdTLS. Empty: the system's roots.
	FlagdCAFile string `toml:"flagd_ca_file"`
	// FlagdSelector picks which of the daemon's flag sources a replica
	// follows (the selector of flagd's sync requests, e.g. the URI of one
	// of its --uri sources). Needs flags_source "flagd". Empty: every flag
	// the daemon serves.
	FlagdSelector string `toml:"flagd_selector"`
	// OFREPURL is the base URL of an OFREP service (the OpenFeature Remote
	// Evaluation Protocol; flagd serves one too): http or https, without
	// a query, a fragment or credentials. Each evaluation is a POST to
	// <url>/ofrep/v1/evaluate/flags/<key>. Required with flags_source
	// "ofrep", refused otherwise.
	OFREPURL string `toml:"ofrep_url"`
	// OFREPTokenEnv names the environment variable holding the bearer
	// token sent to the OFREP service (the name, never the token: a
	// topology is not a secret store). Needs ofrep_url; the variable must
	// be set and not empty. Empty: no Authorization header.
	OFREPTokenEnv string `toml:"ofrep_token_env"`
	// OFREPToken is the token read from $OFREPTokenEnv when the topology
	// was parsed; not a key of the file.
	OFREPToken string `toml:"-"`
	// OFREPCAFile is a CA file (PEM) to verify the OFREP service against.
	// Needs an https ofrep_url. Empty: the system's roots.
	OFREPCAFile string `toml:"ofrep_ca_file"`
	// PlanFile is the rollout plan (optional; the rollout command needs it).
	PlanFile string `toml:"plan_file"`
	// DefaultRule routes shops no pod lists: "modulo" (shop id modulo the
	// number of pods, in file order) or "pod:<name>". Default: "modulo".
	DefaultRule string `toml:"default_rule"`
	// Pods are the cells, lowest traffic first is customary.
	Pods []Pod `toml:"pods"`
}

// Pod is one cell: a group of shops sharing one MySQL and one Redis.
type Pod struct {
	// Name identifies the pod in flags, metrics and the plan. Required:
	// authority.PodNameRule (1-63 lower-case letters, digits, '.', '_' or
	// '-'), the flags' own rule.
	Name string `toml:"name"`
	// MySQLDSN is the pod's ledger and unit-pool database (a
	// go-sql-driver/mysql DSN). Required. A secret field: it may use
	// ${ENV} or file:PATH.
	MySQLDSN string `toml:"mysql_dsn"`
	// MySQLTLSCA is a CA file (PEM): the pod's MySQL is reached over TLS
	// and its certificate verified against it, for the DSN's host. Empty:
	// as MySQLDSN says (tls=true there verifies against the system's
	// roots). Not both: a DSN with a tls parameter and a CA is refused.
	MySQLTLSCA string `toml:"mysql_tls_ca"`
	// RedisAddr is the pod's standalone Redis (host:port). Exactly one of
	// RedisAddr and RedisCluster is required.
	RedisAddr string `toml:"redis_addr"`
	// RedisCluster lists the pod's Redis Cluster seed nodes.
	RedisCluster []string `toml:"redis_cluster"`
	// RedisPrefix starts the pod's Redis keys. Default: "reservoir:".
	RedisPrefix string `toml:"redis_prefix"`
	// RedisUsername is the Redis ACL user. Empty: the default user (AUTH
	// with the password alone, as requirepass expects). It needs
	// RedisPassword. A secret field.
	RedisUsername string `toml:"redis_username"`
	// RedisPassword is the Redis password (of RedisUsername, or of the
	// default user). Empty: no AUTH. A secret field: write it as ${ENV}
	// or file:PATH rather than in the file.
	RedisPassword string `toml:"redis_password"`
	// RedisTLS makes every connection to the pod's Redis (each cluster
	// node's too) use TLS, the server verified against RedisTLSCA or the
	// system's roots. Default: false.
	RedisTLS bool `toml:"redis_tls"`
	// RedisTLSCA is a CA file (PEM) to verify Redis against. Needs
	// RedisTLS. Empty: the system's roots.
	RedisTLSCA string `toml:"redis_tls_ca"`
	// RedisTLSServerName is the name Redis's certificate must carry, when
	// it is not the host dialed (e.g. nodes dialed by IP whose
	// certificate names a DNS name; one name for every cluster node).
	// Needs RedisTLS. Empty: the host of each address.
	RedisTLSServerName string `toml:"redis_tls_server_name"`
	// Shops are routed to this pod explicitly.
	Shops []int64 `toml:"shops"`
	// PoolCap is the MySQL unit pool cap. Default: 1000.
	PoolCap int64 `toml:"pool_cap"`
}

// Load reads and validates a topology file. Its errors name the file and,
// where one is at fault, the line ("topology FILE:14: ..."): an *Error, or
// several joined (every unknown key, each where it is written).
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	c, err := parse(b, os.LookupEnv, os.ReadFile)
	return c, inFile(err, path)
}

// Parse decodes a topology, resolves its secrets (from the environment and
// files, see docs/secrets.md) and validates it. Unknown keys are errors: a
// typo must not silently route traffic somewhere else.
func Parse(b []byte) (*Config, error) {
	return parse(b, os.LookupEnv, os.ReadFile)
}

// parse is Parse with the environment and the file system given.
func parse(b []byte, env func(string) (string, bool), readFile func(string) ([]byte, error)) (*Config, error) {
	var c Config
	lines, err := tomlstrict.DecodeLines(b, &c)
	var unknown *tomlstrict.UnknownKeysError
	switch {
	case errors.As(err, &unknown):
		return nil, c.unknownKeys(unknown)
	case err != nil:
		return nil, fmt.Errorf("topology: %w", err)
	}
	if err := c.resolveSecrets(env, readFile); err != nil {
		return nil, at(err, lines)
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, at(err, lines)
	}
	if err := c.resolveOFREPToken(env); err != nil {
		return nil, at(err, lines)
	}
	return &c, nil
}

// Error is a problem of a topology: what, and where when known (Load
// gives the file, a key the line).
type Error struct {
	// File is the topology file ("" from Parse).
	File string
	// Line is the line at fault, from 1 (0: none in particular).
	Line int
	// Key is the key at fault, with array indexes ("pods[1].mysql_dsn"),
	// or "" for the whole file.
	Key string
	// Msg says what is wrong, naming the key.
	Msg string
	// Err is the cause, when another package's error is (nil otherwise).
	Err error
}

func (e *Error) Unwrap() error { return e.Err }

func (e *Error) Error() string {
	where := "topology"
	switch {
	case e.File != "" && e.Line > 0:
		where += fmt.Sprintf(" %s:%d", e.File, e.Line)
	case e.File != "":
		where += " " + e.File
	case e.Line > 0:
		where += fmt.Sprintf(" line %d", e.Line)
	}
	return where + ": " + e.Msg
}

// fieldError is the *Error of key (with array indexes; "" for none).
func fieldError(key, format string, a ...any) *Error {
	return &Error{Key: key, Msg: fmt.Sprintf(format, a...)}
}

// at gives err, an *Error, the line of its key.
func at(err error, lines *tomlstrict.Lines) error {
	var e *Error
	if errors.As(err, &e) && e.Key != "" && e.Line == 0 {
		e.Line = lines.Line(e.Key)
	}
	return err
}

// inFile names the file in err's *Errors.
func inFile(err error, path string) error {
	if err == nil {
		return nil
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for _, e := range errs {
		if te, ok := e.(*Error); ok {
			te.File = path
			continue
		}
		if !strings.HasPrefix(e.Error(), "topology: ") {
			continue
		}
		// The TOML library's own errors (syntax, a value of the wrong type)
		// name their line already.
		return fmt.Errorf("topology %s: %w", path, errors.Unwrap(e))
	}
	return err
}

// unknownKeys is one *Error per unknown key, where it is written, naming
// the pod of a pod's key and the key it most likely meant.
func (c *Config) unknownKeys(u *tomlstrict.UnknownKeysError) error {
	errs := make([]error, len(u.Keys))
	for i, k := range u.Keys {
		msg := "unknown key " + k.Key
		var n int
		if _, err := fmt.Sscanf(k.Key, "pods[%d]", &n); err == nil && n < len(c.Pods) && c.Pods[n].Name != "" {
			msg += fmt.Sprintf(" (pod %q)", c.Pods[n].Name)
		}
		if k.Hint != "" {
			msg += "; " + k.Hint
		}
		errs[i] = &Error{Line: k.Line, Key: k.Key, Msg: msg}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// WithDefaults fills in the defaults.
func (c Config) WithDefaults() Config {
	if c.DefaultRule == "" {
		c.DefaultRule = "modulo"
	}
	if c.FlagsSource == "" {
		c.FlagsSource = FlagsFromFile
	}
	c.Pods = slices.Clone(c.Pods)
	for i := range c.Pods {
		if c.Pods[i].RedisPrefix == "" {
			c.Pods[i].RedisPrefix = "reservoir:"
		}
		if c.Pods[i].PoolCap == 0 {
			c.Pods[i].PoolCap = 1000
		}
	}
	return c
}

// The values of flags_source.
const (
	// FlagsFromFile: the flags file at flags_file.
	FlagsFromFile = "file"
	// FlagsFromDatabase: the control database's flags document.
	FlagsFromDatabase = "database"
	// FlagsFromFlagd: a flagd daemon's sync service at flagd_addr.
	FlagsFromFlagd = "flagd"
	// FlagsFromOFREP: an OFREP service at ofrep_url, asked at every
	// evaluation.
	FlagsFromOFREP = "ofrep"
	// FlagsFromProvider: an OpenFeature provider the program running
	// serve supplies (package reservoirmain); the topology names none.
	FlagsFromProvider = "provider"
)

// FlagsSources lists the values of flags_source, in the order the docs
// give them.
var FlagsSources = []string{FlagsFromFile, FlagsFromDatabase, FlagsFromFlagd, FlagsFromOFREP, FlagsFromProvider}

// maxPoolCap is the largest pool_cap: the MySQL store's bound on its unit
// pool (mysqlstore.Config.PoolCap), said here in the topology's words.
const maxPoolCap = 100000

// Validate reports the first problem, naming the field.
func (c Config) Validate() error {
	if c.ControlDSN == "" {
		return fieldError("control_dsn", "control_dsn is required")
	}
	if err := c.validateFlagsSource(); err != nil {
		return err
	}
	if len(c.Pods) == 0 {
		return fieldError("", "at least one [[pods]] is required")
	}
	names := map[string]bool{}
	prefixes := map[string]string{} // Redis and prefix -> pod
	owner := map[int64]string{}
	for i, p := range c.Pods {
		f := fmt.Sprintf("pods[%d]", i)
		switch {
		case !authority.ValidPodName(p.Name):
			return fieldError(f+".name", "%s.name %q must be %s (the flags' rule: a pod the flags cannot name could never be switched)", f, p.Name, authority.PodNameRule)
		case names[p.Name]:
			return fieldError(f+".name", "%s.name %q is used twice", f, p.Name)
		case p.MySQLDSN == "":
			return fieldError(f, "%s.mysql_dsn is required", f)
		case (p.RedisAddr == "") == (len(p.RedisCluster) == 0):
			return fieldError(f, "%s: give exactly one of redis_addr and redis_cluster", f)
		case strings.ContainsAny(p.RedisPrefix, "{}"):
			return fieldError(f+".redis_prefix", "%s.redis_prefix must not contain braces", f)
		case p.PoolCap < 1 || p.PoolCap > maxPoolCap:
			return fieldError(f+".pool_cap", "%s.pool_cap must be between 1 and %d, got %d", f, maxPoolCap, p.PoolCap)
		case p.RedisUsername != "" && p.RedisPassword == "":
			return fieldError(f+".redis_username", "%s.redis_username is set but redis_password is empty: an ACL user needs its password", f)
		case p.RedisTLSCA != "" && !p.RedisTLS:
			return fieldError(f+".redis_tls_ca", "%s.redis_tls_ca is set but redis_tls is not: set redis_tls = true to use TLS", f)
		case p.RedisTLSServerName != "" && !p.RedisTLS:
			return fieldError(f+".redis_tls_server_name", "%s.redis_tls_server_name is set but redis_tls is not: set redis_tls = true to use TLS", f)
		}
		names[p.Name] = true
		// Two pods on one Redis with one prefix would share keys: each
		// pod's reaper would settle the other's holds against its own
		// ledger.
		where := p.RedisAddr + "|" + strings.Join(p.RedisCluster, ",") + "|" + p.RedisPrefix
		if other, dup := prefixes[where]; dup {
			return fieldError(f+".redis_prefix", "%s.redis_prefix %q: pod %q uses the same Redis with the same prefix; give each pod its own prefix", f, p.RedisPrefix, other)
		}
		prefixes[where] = p.Name
		for _, s := range p.Shops {
			if s <= 0 {
				return fieldError(f+".shops", "%s.shops: %d is not a positive shop id", f, s)
			}
			if o, dup := owner[s]; dup {
				return fieldError(f+".shops", "%s.shops: shop %d is listed by pods %q and %q", f, s, o, p.Name)
			}
			owner[s] = p.Name
		}
	}
	if c.DefaultRule != "modulo" {
		name, ok := strings.CutPrefix(c.DefaultRule, "pod:")
		if !ok || !names[name] {
			return fieldError("default_rule", "default_rule %q must be \"modulo\" or \"pod:<a pod's name>\"", c.DefaultRule)
		}
	}
	return nil
}

// PodOf returns the pod serving shop.
func (c *Config) PodOf(shop int64) (*Pod, error) {
	if shop <= 0 {
		return nil, fmt.Errorf("topology: shop must be a positive id, got %d", shop)
	}
	for i := range c.Pods {
		if slices.Contains(c.Pods[i].Shops, shop) {
			return &c.Pods[i], nil
		}
	}
	if name, ok := strings.CutPrefix(c.DefaultRule, "pod:"); ok {
		return c.Pod(name)
	}
	return &c.Pods[shop%int64(len(c.Pods))], nil
}

// Pod returns the named pod.
func (c *Config) Pod(name string) (*Pod, error) {
	for i := range c.Pods {
		if c.Pods[i].Name == name {
			return &c.Pods[i], nil
		}
	}
	return nil, fmt.Errorf("topology: no pod named %q", name)
}

// PodNames lists the pods in file order.
func (c *Config) PodNames() []string {
	out := make([]string, len(c.Pods))
	for i, p := range c.Pods {
		out[i] = p.Name
	}
	return out
}

// Lists reports whether a pod lists shop in its shops.
func (c *Config) Lists(shop int64) bool {
	for _, p := range c.Pods {
		if slices.Contains(p.Shops, shop) {
			return true
		}
	}
	return false
}

// maxShopsNamed is how many of a pod's shops UnlistedShop names.
const maxShopsNamed = 8

// UnlistedShop is the error for a shop that no pod lists, given where
// one was expected (a kill switch's scope: a typo there writes a switch
// that protects nothing): it names the shop, the shops each pod lists,
// and where default_rule routes the shop. nil when a pod lists it.
func (c *Config) UnlistedShop(shop int64) error {
	if c.Lists(shop) {
		return nil
	}
	var pods []string
	for _, p := range c.Pods {
		shops := make([]string, 0, min(len(p.Shops), maxShopsNamed))
		for _, s := range p.Shops[:min(len(p.Shops), maxShopsNamed)] {
			shops = append(shops, fmt.Sprint(s))
		}
		switch {
		case len(p.Shops) == 0:
			pods = append(pods, p.Name+": none")
		case len(p.Shops) > maxShopsNamed:
			pods = append(pods, fmt.Sprintf("%s: %s and %d more", p.Name, strings.Join(shops, ", "), len(p.Shops)-maxShopsNamed))
		default:
			pods = append(pods, p.Name+": "+strings.Join(shops, ", "))
		}
	}
	route := ""
	if p, err := c.PodOf(shop); err == nil {
		route = fmt.Sprintf("; default_rule %q would route it to pod %s", c.DefaultRule, p.Name)
	}
	return fmt.Errorf("no pod of the topology lists shop %d (the pods' shops: %s)%s", shop, strings.Join(pods, "; "), route)
}
