package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Build returns the client TLS configuration of a tls block, or nil when it is disabled. Errors name
// the file at fault.
func (t TLS) Build() (*tls.Config, error) {
	c, err := t.build()
	if err != nil {
		return nil, fmt.Errorf("config: tls: %w", err)
	}
	return c, nil
}

func (t TLS) build() (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	c := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // an operator's explicit choice, off by default
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s: no PEM certificate in it", t.CAFile)
		}
		c.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cert_file %s / key_file %s: %w", t.CertFile, t.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	case t.CertFile != "":
		return nil, errors.New("cert_file without key_file: mutual TLS needs both")
	case t.KeyFile != "":
		return nil, errors.New("key_file without cert_file: mutual TLS needs both")
	}
	return c, nil
}

// configured reports whether anything besides enabled is set.
func (t TLS) configured() bool {
	return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.InsecureSkipVerify
}

// SASL mechanism names; internal/kafkaclient builds the kafka-go mechanism of each.
const (
	SASLNone        = ""
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

func validSASLMechanism(name string) bool {
	switch strings.ToLower(name) {
	case SASLNone, SASLPlain, SASLScramSHA256, SASLScramSHA512:
		return true
	}
	return false
}
