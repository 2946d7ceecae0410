// Package testcert makes a throwaway certificate authority and a server
// certificate for 127.0.0.1, ::1 and localhost, for tests of TLS clients
// against real servers started by the test itself (flagdtest, ofreptest).
// Everything is made in memory and written under the test's temporary
// directory; nothing outlives the test.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Set is a CA and a server certificate it signed.
type Set struct {
	// CAFile is the CA certificate (PEM): what a client verifies against.
	CAFile string
	// CertFile and KeyFile are the server's certificate and key (PEM),
	// for 127.0.0.1, ::1 and localhost.
	CertFile, KeyFile string
	// Server is the server's TLS configuration, with that certificate.
	Server *tls.Config
}

// New makes a Set under t.TempDir(), failing the test on any error.
func New(t testing.TB) *Set {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(t, err)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "reservoir testcert CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	check(t, err)
	ca, err := x509.ParseCertificate(caDER)
	check(t, err)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	check(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	check(t, err)

	s := &Set{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server.key")}
	write(t, s.CAFile, "CERTIFICATE", caDER)
	write(t, s.CertFile, "CERTIFICATE", der)
	write(t, s.KeyFile, "EC PRIVATE KEY", keyDER)
	pair, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
	check(t, err)
	s.Server = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	return s
}

func write(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	check(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("testcert: %v", err)
	}
}
