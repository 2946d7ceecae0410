// Package tlsclient builds the TLS settings of reservoir's connections to
// MySQL and Redis: the server is verified against a CA file (PEM) from the
// topology, or against the system's roots, at TLS 1.2 or later.
//
// It never turns verification off. A server whose certificate cannot be
// verified is refused, because a store that talks to an impostor loses
// reservations as surely as one that talks to nobody.
package tlsclient

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/go-sql-driver/mysql"
)

// Config returns a client configuration that verifies the server against
// the certificates in caFile (PEM, one or more), or against the system's
// roots when caFile is empty. serverName is the name the server's
// certificate must carry; empty means the host of the address dialed
// (go-redis and the MySQL driver both fill it in from the address).
func Config(caFile, serverName string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile == "" {
		return c, nil
	}
	pool, _, err := loadCA(caFile)
	if err != nil {
		return nil, err
	}
	c.RootCAs = pool
	return c, nil
}

// loadCA reads caFile into a pool, and returns a digest of its content too.
func loadCA(caFile string) (*x509.CertPool, [32]byte, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("tlsclient: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, [32]byte{}, fmt.Errorf("tlsclient: CA file %s holds no PEM certificate", caFile)
	}
	return pool, sha256.Sum256(pem), nil
}

// MySQLDSN returns dsn (a go-sql-driver/mysql DSN) set to connect over TLS
// verified against caFile. The driver takes TLS settings only by name, so
// the configuration is registered with it (mysql.RegisterTLSConfig) under
// a name made from the CA's content: pods that share a CA share one, and a
// second call with the same file registers nothing new. The server's name
// is the DSN's host, as the driver checks it.
//
// A DSN that already sets tls is refused: with two answers to "how is this
// server verified", one would be silently ignored. Errors never include
// the DSN, which may hold a password.
func MySQLDSN(dsn, caFile string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("tlsclient: parse DSN: %w", err)
	}
	if cfg.TLSConfig != "" {
		return "", fmt.Errorf("tlsclient: the DSN already sets tls=%s; give either a CA file or tls in the DSN, not both", cfg.TLSConfig)
	}
	if caFile == "" {
		return "", errors.New("tlsclient: a CA file is required")
	}
	pool, sum, err := loadCA(caFile)
	if err != nil {
		return "", err
	}
	name := "reservoir-ca-" + hex.EncodeToString(sum[:8])
	if err := mysql.RegisterTLSConfig(name, &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}); err != nil {
		return "", fmt.Errorf("tlsclient: register TLS config: %w", err)
	}
	// ParseDSN fills cfg.TLS only from a tls parameter; setting the name
	// is what FormatDSN writes and what the next ParseDSN looks up.
	cfg.TLSConfig = name
	return cfg.FormatDSN(), nil
}
