package config

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

func TestTLSBuild(t *testing.T) {
	certs := testenv.GenerateTLS(t)
	ca, cert, key := certs.CAFile, certs.ClientCertFile, certs.ClientKeyFile
	dir := t.TempDir()
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

	c, err = TLS{Enabled: true, CAFile: ca, CertFile: cert, KeyFile: key, ServerName: "redis.internal", InsecureSkipVerify: true}.Build()
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
