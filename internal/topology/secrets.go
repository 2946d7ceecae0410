package topology

import (
	"errors"
	"fmt"
	"strings"
)

// FilePrefix starts a secret field whose value is a file's content
// (file:/run/secrets/db-dsn): the whole value is the path.
const FilePrefix = "file:"

// resolveSecrets replaces, in every field that can hold a secret, each
// ${NAME} by the environment variable NAME, or a whole file:PATH value by
// the file's content without its trailing newlines (what `echo` and most
// secret mounts leave). An unset variable, an unreadable or empty file, or a
// malformed reference is an error naming the field and the reference, never
// the value around it: a DSN's text may already hold a password.
//
// Only these fields are resolved: a ${ in a pod name or an address is a
// typo to reject, not a secret to fetch. A resolved value is not looked at
// again, so a secret may itself contain "${" or start with "file:".
func (c *Config) resolveSecrets(env func(string) (string, bool), readFile func(string) ([]byte, error)) error {
	type field struct {
		name string
		v    *string
	}
	fields := []field{{"control_dsn", &c.ControlDSN}}
	for i := range c.Pods {
		p := &c.Pods[i]
		f := fmt.Sprintf("pods[%d]", i)
		fields = append(fields,
			field{f + ".mysql_dsn", &p.MySQLDSN},
			field{f + ".redis_username", &p.RedisUsername},
			field{f + ".redis_password", &p.RedisPassword})
	}
	for _, f := range fields {
		v, err := resolveSecret(*f.v, env, readFile)
		if err != nil {
			return &Error{Key: f.name, Msg: f.name + ": " + err.Error(), Err: err}
		}
		*f.v = v
	}
	return nil
}

func resolveSecret(s string, env func(string) (string, bool), readFile func(string) ([]byte, error)) (string, error) {
	if path, ok := strings.CutPrefix(s, FilePrefix); ok {
		if path == "" {
			return "", errors.New("file: needs a path (file:/run/secrets/NAME)")
		}
		b, err := readFile(path)
		if err != nil {
			// An *fs.PathError: the operation, the path and the cause.
			return "", err
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", fmt.Errorf("file %s is empty", path)
		}
		return v, nil
	}
	var out strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			out.WriteString(s)
			return out.String(), nil
		}
		// $${ is a literal ${, for the rare password that holds one.
		if i > 0 && s[i-1] == '$' {
			out.WriteString(s[:i-1] + "${")
			s = s[i+2:]
			continue
		}
		out.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", errors.New("a ${ has no closing }: write ${NAME}, or $${ for a literal ${")
		}
		name := s[i+2 : i+end]
		if !isEnvName(name) {
			// The name is not echoed: when it is not a name, it may be
			// part of a password.
			return "", errors.New("a ${...} does not hold a variable name (letters, digits and '_', not starting with a digit): write ${NAME}, or $${ for a literal ${")
		}
		v, ok := env(name)
		if !ok {
			return "", fmt.Errorf("${%s} is not set", name)
		}
		out.WriteString(v)
		s = s[i+end+1:]
	}
}

func isEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
