package topology

import (
	"strings"
	"testing"
)

// withFlags is the sample topology with its flags_file line replaced by
// lines.
func withFlags(lines string) string {
	return strings.Replace(sample, "flags_file = \"flags.json\"\n", lines, 1)
}

// flags_source = "ofrep" takes its service from ofrep_url (required,
// http or https), a bearer token from the variable ofrep_token_env names
// (never from the file), and a CA for https; each key is refused with
// another source, and every error names its key.
func TestFlagsFromOFREP(t *testing.T) {
	env := func(name string) (string, bool) {
		switch name {
		case "RESERVOIR_OFREP_TOKEN":
			return "s3cret-token\n", true
		case "EMPTY_TOKEN":
			return " ", true
		}
		return "", false
	}
	c, err := parse([]byte(withFlags("flags_source = \"ofrep\"\nofrep_url = \"https://flags.internal:8016/base\"\n"+
		"ofrep_token_env = \"RESERVOIR_OFREP_TOKEN\"\nofrep_ca_file = \"/etc/reservoir/ca.pem\"\n")), env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.FlagsSource != FlagsFromOFREP || c.OFREPURL != "https://flags.internal:8016/base" || c.OFREPToken != "s3cret-token" || c.OFREPCAFile != "/etc/reservoir/ca.pem" {
		t.Errorf("parsed %+v", c)
	}
	if _, err := parse([]byte(withFlags("flags_source = \"ofrep\"\nofrep_url = \"http://127.0.0.1:8016\"\nofrep_token_env = \"RESERVOIR_OFREP_TOKEN\"\n")), env, nil); err != nil {
		t.Errorf("a token over http to a loopback address: %v", err)
	}
	for _, tc := range []struct{ lines, want string }{
		{"flags_source = \"ofrep\"\n", `line 3: ofrep_url is required with flags_source = "ofrep"`},
		{"flags_source = \"ofrep\"\nofrep_url = \"flags:8016\"\n", `ofrep_url "flags:8016" must start with http:// or https://`},
		{"flags_source = \"ofrep\"\nofrep_url = \"grpc://flags:8016\"\n", `must start with http:// or https://`},
		{"flags_source = \"ofrep\"\nofrep_url = \"https://\"\n", `ofrep_url "https://" names no host`},
		{"flags_source = \"ofrep\"\nofrep_url = \"https://u:pw@flags\"\n", `ofrep_url "https://u:xxxxx@flags" must not carry credentials`},
		{"flags_source = \"ofrep\"\nofrep_url = \"https://flags/?env=prod\"\n", `must not have a query`},
		{"flags_source = \"ofrep\"\nofrep_url = \"https://flags:99999\"\n", `from 1 to 65535`},
		{"flags_source = \"ofrep\"\nofrep_url = \"https://flags\"\nofrep_token_env = \"RESERVOIR_UNSET\"\n", `line 5: ofrep_token_env names $RESERVOIR_UNSET, which is not set`},
		{"flags_source = \"ofrep\"\nofrep_url = \"https://flags\"\nofrep_token_env = \"EMPTY_TOKEN\"\n", `$EMPTY_TOKEN, which is empty`},
		{"flags_source = \"ofrep\"\nofrep_url = \"https://flags\"\nofrep_token_env = \"Bearer abc\"\n", `must be the name of an environment variable`},
		{"flags_source = \"ofrep\"\nofrep_url = \"http://flags.internal\"\nofrep_token_env = \"RESERVOIR_OFREP_TOKEN\"\n", `the bearer token would cross the network in clear`},
		{"flags_source = \"ofrep\"\nofrep_url = \"http://flags.internal\"\nofrep_ca_file = \"ca.pem\"\n", `ofrep_ca_file is set but ofrep_url "http://flags.internal" is not https`},
		{"flags_source = \"flagd\"\nflagd_addr = \"flagd:8015\"\nofrep_url = \"https://flags\"\n", `ofrep_url is set but flags_source is "flagd"`},
		{"flags_file = \"f.json\"\nofrep_token_env = \"RESERVOIR_OFREP_TOKEN\"\n", `ofrep_token_env is set but flags_source is "file"`},
		{"flags_source = \"ofrep\"\nofrep_url = \"https://flags\"\nflags_file = \"f.json\"\n", `flags_file is set but flags_source is "ofrep"`},
	} {
		_, err := parse([]byte(withFlags(tc.lines)), env, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: want an error containing %q, got %v", tc.lines, tc.want, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: the error shows the token: %v", tc.lines, err)
		}
	}
}

// flags_source = "provider" names nothing else: the program supplies the
// provider; every other source's key is refused with it.
func TestFlagsFromProvider(t *testing.T) {
	c, err := Parse([]byte(withFlags("flags_source = \"provider\"\n")))
	if err != nil || c.FlagsSource != FlagsFromProvider {
		t.Fatalf("parsed %+v, %v", c, err)
	}
	for lines, want := range map[string]string{
		"flags_source = \"provider\"\nflags_file = \"f.json\"\n":       `flags_file is set but flags_source is "provider"`,
		"flags_source = \"provider\"\nflagd_addr = \"flagd:8015\"\n":   `flagd_addr is set but flags_source is "provider"`,
		"flags_source = \"provider\"\nofrep_url = \"https://flags\"\n": `ofrep_url is set but flags_source is "provider"`,
	} {
		if _, err := Parse([]byte(withFlags(lines))); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: want %q, got %v", lines, want, err)
		}
	}
}

// flags_source = "flagd" takes TLS (flagd_tls, and flagd_ca_file, which
// needs it) and a selector; none of them with another source.
func TestFlagdTLSAndSelector(t *testing.T) {
	c, err := Parse([]byte(withFlags("flags_source = \"flagd\"\nflagd_addr = \"flagd:8015\"\nflagd_tls = true\n" +
		"flagd_ca_file = \"/etc/reservoir/ca.pem\"\nflagd_selector = \"file:/etc/flagd/reservoir.json\"\n")))
	if err != nil {
		t.Fatal(err)
	}
	if !c.FlagdTLS || c.FlagdCAFile != "/etc/reservoir/ca.pem" || c.FlagdSelector != "file:/etc/flagd/reservoir.json" {
		t.Errorf("parsed %+v", c)
	}
	for lines, want := range map[string]string{
		"flags_source = \"flagd\"\nflagd_addr = \"flagd:8015\"\nflagd_ca_file = \"ca.pem\"\n": `line 5: flagd_ca_file is set but flagd_tls is not`,
		"flags_file = \"f.json\"\nflagd_tls = true\n":                                         `flagd_tls is set but flags_source is "file"`,
		"flags_source = \"database\"\nflagd_selector = \"x\"\n":                               `flagd_selector is set but flags_source is "database"`,
	} {
		if _, err := Parse([]byte(withFlags(lines))); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: want %q, got %v", lines, want, err)
		}
	}
}
