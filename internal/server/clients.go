package server

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/seed31b0e981/reservoir/internal/tomlstrict"
)

// The roles a checkout API client can hold, and what each may call.
const (
	// RoleCheckout may reserve, read, claim and release reservations and
	// read availability: what a checkout service needs.
	RoleCheckout = "checkout"
	// RoleInventory may adjust stock and read availability: what a
	// merchant or warehouse integration needs.
	RoleInventory = "inventory"
)

// roleOps lists the API operations each role allows.
var roleOps = map[string][]string{
	RoleCheckout:  {"reserve", "get", "claim", "release", "availability"},
	RoleInventory: {"adjust", "availability"},
}

// Client is one checkout API client: a named bearer token, kept as its
// SHA-256 digest, with the operations and shops it may use.
type Client struct {
	// Name identifies the client in logs and metrics. Required: 1-64
	// letters, digits, '.', '_' or '-'.
	Name string `toml:"name"`
	// TokenSHA256 is the hex SHA-256 of the client's bearer token. The
	// token itself is stored nowhere: whoever reads the file cannot call
	// the API with it. Required.
	TokenSHA256 string `toml:"token_sha256"`
	// Roles are what the client may do: "checkout" (reserve, get, claim,
	// release, availability) and/or "inventory" (adjust, availability).
	// Required.
	Roles []string `toml:"roles"`
	// Shops, when set, are the only shops the client may touch; a call for
	// another shop answers 403. Empty: every shop.
	Shops []int64 `toml:"shops"`

	digest [sha256.Size]byte
	ops    map[string]bool
}

// Clients is the set of checkout API clients a server accepts.
type Clients struct {
	list []*Client
}

var clientName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ClientsFromEnv is the environment variable that may hold a clients
// file's content, for deployments that pass secrets as environment
// variables (a Kubernetes Secret as env).
const ClientsFromEnv = "RESERVOIR_CLIENTS"

// LoadClients reads a clients file (see ParseClients).
func LoadClients(path string) (*Clients, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("clients: %w", err)
	}
	c, err := ParseClients(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseClients decodes and validates a clients file:
//
//	[[clients]]
//	name = "checkout-web"
//	token_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//	roles = ["checkout"]
//	shops = [7001, 7002]   # optional
//
// Unknown keys, a missing field, an unknown role, a digest that is not 64
// hex digits, and a name or digest used twice are errors naming the entry
// and the field.
func ParseClients(b []byte) (*Clients, error) {
	var doc struct {
		Clients []*Client `toml:"clients"`
	}
	if err := tomlstrict.Decode(b, &doc); err != nil {
		return nil, fmt.Errorf("clients: %w", err)
	}
	if len(doc.Clients) == 0 {
		return nil, errors.New("clients: no [[clients]] entry: a server with no client answers every /v1 call 401")
	}
	names, digests := map[string]bool{}, map[string]string{}
	for i, c := range doc.Clients {
		f := fmt.Sprintf("clients[%d]", i)
		if err := c.prepare(f); err != nil {
			return nil, err
		}
		if names[c.Name] {
			return nil, fmt.Errorf("clients: %s.name %q is used twice", f, c.Name)
		}
		if other, dup := digests[c.TokenSHA256]; dup {
			return nil, fmt.Errorf("clients: %s.token_sha256: the same token as %q; give each client its own", f, other)
		}
		names[c.Name], digests[c.TokenSHA256] = true, c.Name
	}
	return &Clients{list: doc.Clients}, nil
}

// prepare validates c (f names it in errors) and precomputes its digest
// and operations.
func (c *Client) prepare(f string) error {
	if !clientName.MatchString(c.Name) {
		return fmt.Errorf("clients: %s.name %q must be 1-64 letters, digits, '.', '_' or '-'", f, c.Name)
	}
	c.TokenSHA256 = strings.ToLower(strings.TrimSpace(c.TokenSHA256))
	d, err := hex.DecodeString(c.TokenSHA256)
	if err != nil || len(d) != sha256.Size {
		return fmt.Errorf("clients: %s.token_sha256 must be 64 hex digits (the SHA-256 of the token; `reservoir clients new` makes one)", f)
	}
	copy(c.digest[:], d)
	if len(c.Roles) == 0 {
		return fmt.Errorf("clients: %s.roles is required: %q and/or %q", f, RoleCheckout, RoleInventory)
	}
	c.ops = map[string]bool{}
	for _, r := range c.Roles {
		ops, ok := roleOps[r]
		if !ok {
			return fmt.Errorf("clients: %s.roles: unknown role %q (roles: %q, %q)", f, r, RoleCheckout, RoleInventory)
		}
		for _, op := range ops {
			c.ops[op] = true
		}
	}
	for _, s := range c.Shops {
		if s <= 0 {
			return fmt.Errorf("clients: %s.shops: %d is not a positive shop id", f, s)
		}
	}
	return nil
}

// Names lists the clients' names, in file order.
func (cs *Clients) Names() []string {
	out := make([]string, len(cs.list))
	for i, c := range cs.list {
		out[i] = c.Name
	}
	return out
}

// authenticate finds the client whose token r bears. Every client's
// digest is compared, in constant time, whatever matches: neither which
// client matched nor how much of a digest did leaks through timing.
func (cs *Clients) authenticate(r *http.Request) (*Client, *problem) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, &problem{Status: http.StatusUnauthorized, Code: "unauthorized",
			Message: "the checkout API needs an Authorization: Bearer <token> header with a client token (docs/api.md, \"Authentication\")"}
	}
	sum := sha256.Sum256([]byte(token))
	var found *Client
	for _, c := range cs.list {
		if subtle.ConstantTimeCompare(sum[:], c.digest[:]) == 1 {
			found = c
		}
	}
	if found == nil {
		return nil, &problem{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "unknown client token"}
	}
	return found, nil
}

// permit says whether c may run op on shop: nil, or the 403 answer.
func (c *Client) permit(op string, shop int64) *problem {
	if !c.ops[op] {
		return &problem{Status: http.StatusForbidden, Code: "forbidden",
			Message: fmt.Sprintf("client %q (roles %s) may not %s", c.Name, strings.Join(c.Roles, ", "), op)}
	}
	if len(c.Shops) > 0 && !slices.Contains(c.Shops, shop) {
		return &problem{Status: http.StatusForbidden, Code: "forbidden", Field: "shop",
			Message: fmt.Sprintf("client %q may not act for shop %d", c.Name, shop)}
	}
	return nil
}

// NewClientCredential makes a client with a fresh random token (32 bytes
// from crypto/rand, base64url): it returns the token, to hand to the
// client once, and the clients file entry that accepts it, which holds
// only the token's digest.
func NewClientCredential(name string, roles []string, shops []int64) (token, entry string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	token = "rsv_" + base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(token))
	c := &Client{Name: name, TokenSHA256: hex.EncodeToString(sum[:]), Roles: roles, Shops: shops}
	if err := c.prepare("new client"); err != nil {
		return "", "", err
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "[[clients]]\nname = %q\ntoken_sha256 = %q\nroles = [", c.Name, c.TokenSHA256)
	for i, r := range roles {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(strconv.Quote(r))
	}
	sb.WriteString("]\n")
	if len(shops) > 0 {
		sb.WriteString("shops = [")
		for i, s := range shops {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(strconv.FormatInt(s, 10))
		}
		sb.WriteString("]\n")
	}
	return token, sb.String(), nil
}
