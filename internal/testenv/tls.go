package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSFiles are PEM files of a test CA, a server certificate it signed (for 127.0.0.1, ::1, localhost and
// the hosts given to GenerateTLS) and a client certificate it signed.
type TLSFiles struct {
	CAFile, CertFile, KeyFile     string // CA certificate; server certificate and key
	ClientCertFile, ClientKeyFile string
	CAPEM                         []byte // contents of CAFile
}

// GenerateTLS writes a fresh CA, server and client certificate (ECDSA P-256, valid from an hour ago for
// 30 days) to tb.TempDir. hosts are extra server names: IP addresses or DNS names.
func GenerateTLS(tb testing.TB, hosts ...string) *TLSFiles {
	tb.Helper()
	dir := tb.TempDir()
	now := time.Now()
	template := func(cn string) *x509.Certificate {
		serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
		if err != nil {
			tb.Fatalf("testenv: tls serial: %v", err)
		}
		return &x509.Certificate{
			SerialNumber: serial,
			Subject:      pkix.Name{CommonName: cn, Organization: []string{"heartbeatd tests"}},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(30 * 24 * time.Hour),
		}
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			tb.Fatalf("testenv: tls key: %v", err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			tb.Fatalf("testenv: write %s: %v", path, err)
		}
		return path
	}
	writeKey := func(name string, k *ecdsa.PrivateKey) string {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			tb.Fatalf("testenv: marshal key: %v", err)
		}
		return write(name, "PRIVATE KEY", der)
	}

	caKey := newKey()
	caTmpl := template("heartbeatd test CA")
	caTmpl.IsCA = true
	caTmpl.BasicConstraintsValid = true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatalf("testenv: create CA: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatalf("testenv: parse CA: %v", err)
	}
	sign := func(tmpl *x509.Certificate, k *ecdsa.PrivateKey) []byte {
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			tb.Fatalf("testenv: sign %s: %v", tmpl.Subject.CommonName, err)
		}
		return der
	}

	srvKey := newKey()
	srvTmpl := template("localhost")
	srvTmpl.KeyUsage = x509.KeyUsageDigitalSignature
	srvTmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	srvTmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	srvTmpl.DNSNames = []string{"localhost"}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			srvTmpl.IPAddresses = append(srvTmpl.IPAddresses, ip)
		} else {
			srvTmpl.DNSNames = append(srvTmpl.DNSNames, h)
		}
	}

	cliKey := newKey()
	cliTmpl := template("heartbeatd-test-client")
	cliTmpl.KeyUsage = x509.KeyUsageDigitalSignature
	cliTmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}

	f := &TLSFiles{
		CAFile:         write("ca.pem", "CERTIFICATE", caDER),
		CertFile:       write("server.pem", "CERTIFICATE", sign(srvTmpl, srvKey)),
		KeyFile:        writeKey("server-key.pem", srvKey),
		ClientCertFile: write("client.pem", "CERTIFICATE", sign(cliTmpl, cliKey)),
		ClientKeyFile:  writeKey("client-key.pem", cliKey),
		CAPEM:          pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
	}
	return f
}

// ServerConfig is a server-side tls.Config with the server certificate. Client certificates are verified
// against the CA when a client presents one, and not required.
func (f *TLSFiles) ServerConfig(tb testing.TB) *tls.Config {
	tb.Helper()
	c, err := f.config(f.CertFile, f.KeyFile)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	c.ClientCAs, c.ClientAuth = c.RootCAs, tls.VerifyClientCertIfGiven
	c.RootCAs = nil
	return c
}

// ClientConfig is a client-side tls.Config trusting the CA and presenting the client certificate.
func (f *TLSFiles) ClientConfig(tb testing.TB) *tls.Config {
	tb.Helper()
	c, err := f.clientConfig()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return c
}

func (f *TLSFiles) clientConfig() (*tls.Config, error) {
	return f.config(f.ClientCertFile, f.ClientKeyFile)
}

// config presents the certificate in certFile and keyFile and trusts the CA (as RootCAs).
func (f *TLSFiles) config(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("testenv: load certificate %s: %w", certFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(f.CAPEM) {
		return nil, errors.New("testenv: no certificate in CAPEM")
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
