package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/seed31b0e981/reservoir/internal/tomlstrict"
)

// The roles an operator of the admin API can hold. Each includes the ones
// before it: an incident responder who may stop the migration (the kill
// switch) need not be able to move it forward, and whoever only watches
// it (a dashboard on a wall, an on-call shadow) needs neither.
const (
	// RoleViewer reads: the rollout's status and history, diffs, stats,
	// series and the last reconcile reports (the dashboard's data).
	RoleViewer = "viewer"
	// RoleOperator is a viewer who may also engage and release the kill
	// switch, and run a reconcile report: what an incident needs.
	RoleOperator = "operator"
	// RoleAdmin may do everything: advance the rollout's stages (with
	// overrides), and whatever later admin calls change.
	RoleAdmin = "admin"
)

// roleRank orders the admin roles: a role may do what every lower one
// may.
var roleRank = map[string]int{RoleViewer: 1, RoleOperator: 2, RoleAdmin: 3}

// LegacyAdminName is the identity of the single shared admin token
// (--admin-token-file or $RESERVOIR_ADMIN_TOKEN): role admin, and no
// person behind it, so its calls keep naming their actor with the
// X-Reservoir-Actor header.
const LegacyAdminName = "admin-token"

// OperatorsFromEnv is the environment variable that may hold an operators
// file's content, as ClientsFromEnv does for the clients file.
const OperatorsFromEnv = "RESERVOIR_OPERATORS"

// Operator is one person (or tool) allowed on the admin API: a named
// bearer token, kept as its SHA-256 digest, and the role it holds. The
// name is what the audit records for the changes it makes.
type Operator struct {
	// Name identifies the operator in the audit, logs and answers.
	// Required: 1-64 letters, digits, '.', '_' or '-'; not "admin-token"
	// (the shared token's identity).
	Name string `toml:"name"`
	// TokenSHA256 is the hex SHA-256 of the operator's bearer token; the
	// token itself is stored nowhere. Required.
	TokenSHA256 string `toml:"token_sha256"`
	// Role is "viewer", "operator" or "admin". Required.
	Role string `toml:"role"`

	// tokenHash is TokenSHA256 decoded: what authorize compares, in
	// constant time, with the presented token's digest.
	tokenHash [sha256.Size]byte
	// legacy marks the shared admin token's identity, whose calls may
	// name their actor with the X-Reservoir-Actor header.
	legacy bool
}

// Operators is the set of admin API identities a server accepts.
type Operators struct {
	list []*Operator
}

// LoadOperators reads an operators file (see ParseOperators).
func LoadOperators(path string) (*Operators, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("operators: %w", err)
	}
	o, err := ParseOperators(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return o, nil
}

// ParseOperators decodes and validates an operators file:
//
//	[[operators]]
//	name = "alice"
//	token_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//	role = "operator"
//
// Unknown keys, a missing field, an unknown role, a digest that is not 64
// hex digits, and a name or digest used twice are errors naming the entry
// and the field, as in the clients file.
func ParseOperators(b []byte) (*Operators, error) {
	var doc struct {
		Operators []*Operator `toml:"operators"`
	}
	if err := tomlstrict.Decode(b, &doc); err != nil {
		return nil, fmt.Errorf("operators: %w", err)
	}
	if len(doc.Operators) == 0 {
		return nil, errors.New("operators: no [[operators]] entry: nobody could call the admin API")
	}
	names, digests := map[string]bool{}, map[string]string{}
	for i, o := range doc.Operators {
		f := fmt.Sprintf("operators[%d]", i)
		if err := o.prepare(f); err != nil {
			return nil, err
		}
		if names[o.Name] {
			return nil, fmt.Errorf("operators: %s.name %q is used twice", f, o.Name)
		}
		if other, dup := digests[o.TokenSHA256]; dup {
			return nil, fmt.Errorf("operators: %s.token_sha256: the same token as %q; give each operator their own", f, other)
		}
		names[o.Name], digests[o.TokenSHA256] = true, o.Name
	}
	return &Operators{list: doc.Operators}, nil
}

// prepare validates o (f names it in errors) and decodes its digest.
func (o *Operator) prepare(f string) error {
	if !clientName.MatchString(o.Name) {
		return fmt.Errorf("operators: %s.name %q must be 1-64 letters, digits, '.', '_' or '-'", f, o.Name)
	}
	if o.Name == LegacyAdminName {
		return fmt.Errorf("operators: %s.name %q is the shared admin token's identity; give the operator their own name", f, o.Name)
	}
	o.TokenSHA256 = strings.ToLower(strings.TrimSpace(o.TokenSHA256))
	d, err := hex.DecodeString(o.TokenSHA256)
	if err != nil || len(d) != sha256.Size {
		return fmt.Errorf("operators: %s.token_sha256 must be 64 hex digits (the SHA-256 of the token: `reservoir operators new` makes one, or `printf %%s \"$TOKEN\" | sha256sum`)", f)
	}
	copy(o.tokenHash[:], d)
	if _, ok := roleRank[o.Role]; !ok {
		return fmt.Errorf("operators: %s.role: %s (roles: %q, %q, %q)", f, roleWord(o.Role), RoleViewer, RoleOperator, RoleAdmin)
	}
	return nil
}

// roleWord says what is wrong with a role that is not one: missing or
// unknown.
func roleWord(r string) string {
	if r == "" {
		return "is required"
	}
	return fmt.Sprintf("unknown role %q", r)
}

// Names lists the operators' names, in file order.
func (ops *Operators) Names() []string {
	if ops == nil {
		return nil
	}
	out := make([]string, len(ops.list))
	for i, o := range ops.list {
		out[i] = o.Name
	}
	return out
}

// may says whether o's role includes role.
func (o *Operator) may(role string) bool {
	return roleRank[o.Role] >= roleRank[role]
}

// adminSet is what authorize checks a token against: the operators and,
// when one is configured, the shared admin token as the identity
// LegacyAdminName. It is rebuilt whole at every reload and swapped
// atomically, so a call sees one consistent set.
type adminSet struct {
	list []*Operator
}

// newAdminSet joins the operators (nil: none) and the shared admin
// token's digest (nil: none). A token that is also an operator's is
// refused: the same secret cannot be two identities.
func newAdminSet(ops *Operators, legacy *[sha256.Size]byte) (*adminSet, error) {
	set := &adminSet{}
	if ops != nil {
		set.list = append(set.list, ops.list...)
	}
	if legacy != nil {
		l := &Operator{Name: LegacyAdminName, TokenSHA256: hex.EncodeToString(legacy[:]), Role: RoleAdmin, legacy: true, tokenHash: *legacy}
		for _, o := range set.list {
			if o.TokenSHA256 == l.TokenSHA256 {
				return nil, fmt.Errorf("the shared admin token is also operator %q's token: give the operator their own token, or drop the shared one", o.Name)
			}
		}
		set.list = append(set.list, l)
	}
	return set, nil
}

// CheckAdminIdentities reports whether ops (nil: none) and the shared
// admin token ("": none) can be in force together, as New would find:
// the token must be at least 16 bytes and no operator's. serve calls it
// before opening anything, to refuse a bad start at once.
func CheckAdminIdentities(ops *Operators, adminToken string) error {
	if adminToken == "" {
		return nil
	}
	if len(adminToken) < minAdminToken {
		return fmt.Errorf("the admin token must be at least %d bytes", minAdminToken)
	}
	d := sha256.Sum256([]byte(adminToken))
	_, err := newAdminSet(ops, &d)
	return err
}

// minAdminToken is the shortest shared admin token the server accepts.
const minAdminToken = 16

// NewOperatorCredential makes an operator with a fresh random token (32
// bytes from crypto/rand, base64url): it returns the token, to hand to
// the operator once, and the operators file entry that accepts it, which
// holds only the token's digest.
func NewOperatorCredential(name, role string) (token, entry string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	token = "rsvop_" + base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(token))
	o := &Operator{Name: name, TokenSHA256: hex.EncodeToString(sum[:]), Role: role}
	if err := o.prepare("new operator"); err != nil {
		return "", "", err
	}
	return token, fmt.Sprintf("[[operators]]\nname = %q\ntoken_sha256 = %q\nrole = %q\n", o.Name, o.TokenSHA256, o.Role), nil
}
