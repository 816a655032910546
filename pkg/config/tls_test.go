package config

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
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeCert writes a self-signed certificate and its key as PEM files (the certificate doubles as CA).
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "heartbeatd-test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certFile, keyFile
}

func TestTLSBuild(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	notPEM := filepath.Join(dir, "garbage.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))

	c, err := TLS{}.Build()
	require.NoError(t, err)
	assert.Nil(t, c, "disabled")

	c, err = TLS{Enabled: true}.Build()
	require.NoError(t, err)
	require.NotNil(t, c)
	assert.Nil(t, c.RootCAs, "system roots")
	assert.Equal(t, uint16(tls.VersionTLS12), c.MinVersion)

	c, err = TLS{Enabled: true, CAFile: cert, CertFile: cert, KeyFile: key, ServerName: "redis.internal", InsecureSkipVerify: true}.Build()
	require.NoError(t, err)
	assert.NotNil(t, c.RootCAs)
	assert.Len(t, c.Certificates, 1)
	assert.Equal(t, "redis.internal", c.ServerName)
	assert.True(t, c.InsecureSkipVerify)

	tests := []struct {
		name string
		tls  TLS
		want string
	}{
		{"missing CA", TLS{Enabled: true, CAFile: filepath.Join(dir, "nope.pem")}, "config: tls: ca_file: open " + filepath.Join(dir, "nope.pem")},
		{"CA not PEM", TLS{Enabled: true, CAFile: notPEM}, "config: tls: ca_file " + notPEM + ": no PEM certificate"},
		{"bad pair", TLS{Enabled: true, CertFile: cert, KeyFile: notPEM}, "config: tls: cert_file " + cert + " / key_file " + notPEM},
		{"cert only", TLS{Enabled: true, CertFile: cert}, "cert_file without key_file"},
		{"key only", TLS{Enabled: true, KeyFile: key}, "key_file without cert_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.tls.Build()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
