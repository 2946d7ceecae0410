package topology

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/seed31b0e981/reservoir/internal/netaddr"
)

// validateFlagsSource checks flags_source and the keys that belong to
// it: each source's keys are required with it and refused with any
// other, so a topology never names a place the replicas would not read.
func (c Config) validateFlagsSource() error {
	src := c.FlagsSource
	if !slices.Contains(FlagsSources, src) {
		return fieldError("flags_source", "flags_source %q must be %s", src, quotedList(FlagsSources))
	}
	// Each key and the source it belongs to, in the file's order.
	for _, k := range []struct {
		key, source string
		set         bool
	}{
		{"flags_file", FlagsFromFile, c.FlagsFile != ""},
		{"flagd_addr", FlagsFromFlagd, c.FlagdAddr != ""},
		{"flagd_tls", FlagsFromFlagd, c.FlagdTLS},
		{"flagd_ca_file", FlagsFromFlagd, c.FlagdCAFile != ""},
		{"flagd_selector", FlagsFromFlagd, c.FlagdSelector != ""},
		{"ofrep_url", FlagsFromOFREP, c.OFREPURL != ""},
		{"ofrep_token_env", FlagsFromOFREP, c.OFREPTokenEnv != ""},
		{"ofrep_ca_file", FlagsFromOFREP, c.OFREPCAFile != ""},
	} {
		if k.set && src != k.source {
			return fieldError(k.key, "%s is set but flags_source is %q: the replicas would not use it; set flags_source = %q or remove %s",
				k.key, src, k.source, k.key)
		}
	}
	switch src {
	case FlagsFromFile:
		if c.FlagsFile == "" {
			return fieldError("flags_source", `flags_file is required (or flags_source = "database", "flagd", "ofrep" or "provider")`)
		}
	case FlagsFromFlagd:
		if c.FlagdAddr == "" {
			return fieldError("flags_source", `flagd_addr is required with flags_source = "flagd" (the daemon's sync service, host:port)`)
		}
		if err := netaddr.HostPort(c.FlagdAddr); err != nil {
			return &Error{Key: "flagd_addr", Msg: "flagd_addr " + err.Error(), Err: err}
		}
		if c.FlagdCAFile != "" && !c.FlagdTLS {
			return fieldError("flagd_ca_file", "flagd_ca_file is set but flagd_tls is not: set flagd_tls = true to use TLS")
		}
	case FlagsFromOFREP:
		return c.validateOFREP()
	}
	return nil
}

// envName is a portable environment variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validateOFREP checks ofrep_url and its companions. A bearer token is
// refused over plain http except to a loopback address: anyone on the
// path could read it and then read, or with some services change, the
// flags.
func (c Config) validateOFREP() error {
	if c.OFREPURL == "" {
		return fieldError("flags_source", `ofrep_url is required with flags_source = "ofrep" (the OFREP service's base URL, e.g. "https://flags.internal:8016")`)
	}
	u, err := CheckOFREPURL(c.OFREPURL)
	if err != nil {
		return &Error{Key: "ofrep_url", Msg: "ofrep_url " + err.Error(), Err: err}
	}
	if c.OFREPTokenEnv != "" && !envName.MatchString(c.OFREPTokenEnv) {
		return fieldError("ofrep_token_env", "ofrep_token_env %q must be the name of an environment variable (letters, digits and _, not starting with a digit), not the token itself", c.OFREPTokenEnv)
	}
	if c.OFREPTokenEnv != "" && u.Scheme == "http" && !loopback(u.Hostname()) {
		return fieldError("ofrep_token_env", "ofrep_token_env is set but ofrep_url %q is plain http: the bearer token would cross the network in clear; use https", c.OFREPURL)
	}
	if c.OFREPCAFile != "" && u.Scheme != "https" {
		return fieldError("ofrep_ca_file", "ofrep_ca_file is set but ofrep_url %q is not https: the CA would verify nothing", c.OFREPURL)
	}
	return nil
}

// CheckOFREPURL parses an OFREP service's base URL: http or https, with a
// host, without credentials, a query or a fragment (the provider appends
// /ofrep/v1/evaluate/flags/<key> to the path, and would drop or mangle
// them). The error says what is wrong, without the field's name.
func CheckOFREPURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%q is not a URL: %w", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%q must start with http:// or https://", s)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("%q names no host", s)
	case u.User != nil:
		return nil, fmt.Errorf("%q must not carry credentials (give a token with ofrep_token_env)", u.Redacted())
	case u.RawQuery != "" || u.ForceQuery:
		return nil, fmt.Errorf("%q must not have a query", s)
	case u.Fragment != "":
		return nil, fmt.Errorf("%q must not have a fragment", s)
	}
	if p := u.Port(); p != "" {
		if err := netaddr.HostPort(u.Host); err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
	}
	return u, nil
}

// loopback reports whether host is a loopback address or localhost.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// resolveOFREPToken reads the OFREP bearer token from the variable
// ofrep_token_env names. Unset or empty is an error naming the variable:
// a replica that sent no token would be refused at every evaluation, and
// serve nothing, with the cause buried in its log.
func (c *Config) resolveOFREPToken(env func(string) (string, bool)) error {
	if c.OFREPTokenEnv == "" {
		return nil
	}
	v, ok := env(c.OFREPTokenEnv)
	switch {
	case !ok:
		return fieldError("ofrep_token_env", "ofrep_token_env names $%s, which is not set (it must hold the OFREP service's bearer token)", c.OFREPTokenEnv)
	case strings.TrimSpace(v) == "":
		return fieldError("ofrep_token_env", "ofrep_token_env names $%s, which is empty (it must hold the OFREP service's bearer token)", c.OFREPTokenEnv)
	}
	c.OFREPToken = strings.TrimSpace(v)
	return nil
}

// quotedList is "a", "b", "c" or "d".
func quotedList(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = fmt.Sprintf("%q", v)
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
