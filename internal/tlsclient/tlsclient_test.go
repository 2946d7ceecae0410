package tlsclient

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// writeCA writes a fresh self-signed CA certificate (PEM) and returns its
// path.
func writeCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tlsclient test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfig(t *testing.T) {
	t.Parallel()
	ca := writeCA(t)
	c, err := Config(ca, "redis.internal")
	if err != nil {
		t.Fatal(err)
	}
	if c.RootCAs == nil || c.ServerName != "redis.internal" || c.MinVersion != tls.VersionTLS12 || c.InsecureSkipVerify {
		t.Errorf("config: %+v", c)
	}
	if c, err := Config("", ""); err != nil || c.RootCAs != nil {
		t.Errorf("no CA file: the system's roots (RootCAs nil), got %v %v", c.RootCAs, err)
	}
}

func TestConfigRefusesABadCAFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		filepath.Join(dir, "missing.pem"): "tlsclient: CA file: open " + filepath.Join(dir, "missing.pem") + ": no such file or directory",
		notPEM:                            "tlsclient: CA file " + notPEM + " holds no PEM certificate",
	} {
		if _, err := Config(path, ""); err == nil || err.Error() != want {
			t.Errorf("Config(%s): %v, want %s", path, err, want)
		}
		if _, err := MySQLDSN("u:p@tcp(h:3306)/db", path); err == nil || err.Error() != want {
			t.Errorf("MySQLDSN(%s): %v, want %s", path, err, want)
		}
	}
}

// The DSN names a registered configuration that verifies against the CA
// for the DSN's host; the same CA gives the same name; the rest of the DSN
// is kept.
func TestMySQLDSN(t *testing.T) {
	t.Parallel()
	ca := writeCA(t)
	dsn, err := MySQLDSN("u:p@tcp(db.internal:3306)/reservoir?parseTime=true", ca)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("the driver cannot parse %s: %v", dsn, err)
	}
	if !strings.HasPrefix(cfg.TLSConfig, "reservoir-ca-") || cfg.TLS == nil || cfg.TLS.RootCAs == nil || cfg.TLS.InsecureSkipVerify {
		t.Fatalf("TLS not set up: %q %+v", cfg.TLSConfig, cfg.TLS)
	}
	if cfg.TLS.ServerName != "db.internal" || cfg.User != "u" || cfg.Passwd != "p" || cfg.DBName != "reservoir" || !cfg.ParseTime {
		t.Errorf("DSN changed: %+v", cfg)
	}
	again, err := MySQLDSN("v:q@tcp(other:3306)/x", ca)
	if err != nil {
		t.Fatal(err)
	}
	if c2, _ := mysql.ParseDSN(again); c2 == nil || c2.TLSConfig != cfg.TLSConfig {
		t.Errorf("one CA, two names: %s, %s", dsn, again)
	}
	if other, _ := MySQLDSN("u:p@tcp(h:3306)/db", writeCA(t)); strings.Contains(other, "tls="+cfg.TLSConfig) {
		t.Errorf("two CAs, one name: %s", other)
	}
}

// A DSN with its own tls parameter is refused, and no error shows the
// DSN's password.
func TestMySQLDSNRefusals(t *testing.T) {
	t.Parallel()
	ca := writeCA(t)
	for dsn, want := range map[string]string{
		"u:hunter2@tcp(h:3306)/db?tls=true":  "tlsclient: the DSN already sets tls=true; give either a CA file or tls in the DSN, not both",
		"u:hunter2@tcp(h:3306)/db?tls=false": "tlsclient: the DSN already sets tls=false; give either a CA file or tls in the DSN, not both",
		"u:hunter2@tcp(h:3306)db":            "tlsclient: parse DSN: invalid DSN: missing the slash separating the database name",
	} {
		_, err := MySQLDSN(dsn, ca)
		if err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", dsn, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}
