// Package kafkaclient is what heartbeatd's Kafka clients share: Group, a consumer group of its own on a
// topic heartbeatd publishes (the notifier's and the incident history's on the events topic), and
// SASLMechanism, which turns a config sasl block into the kafka-go mechanism that the event publisher
// (internal/eventkafka), the ingest Kafka source (internal/ingest) and the groups log in with;
// internal/daemon builds one for each. It stands apart from them so that none depends on another to
// authenticate or to read, and internal/config keeps SASL settings as plain strings that name no client
// library. It is internal: the SCRAM client is heartbeatd's own, not an API it offers.
package kafkaclient

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"

	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
)

// SASLMechanism returns the kafka-go SASL mechanism for a config's sasl block (docs/configuration.md): mechanism ""
// (no SASL: nil, nil), "plain", "scram-sha-256" or "scram-sha-512", case-insensitive.
//
// SCRAM is implemented here rather than through kafka-go/sasl/scram, which pulls in a further module for
// SASLprep. Kafka itself does not SASLprep: its brokers derive the salted password from the password's
// plain UTF-8 bytes and escape only ',' and '=' in the user name, which is exactly what this client does,
// so non-ASCII passwords authenticate against Kafka here where a SASLprep client could fail.
func SASLMechanism(mechanism, username, password string) (sasl.Mechanism, error) {
	switch strings.ToLower(mechanism) {
	case "":
		return nil, nil
	case "plain":
		return plain.Mechanism{Username: username, Password: password}, nil
	case "scram-sha-256":
		return &scram{name: "SCRAM-SHA-256", hash: sha256.New, user: username, pass: password}, nil
	case "scram-sha-512":
		return &scram{name: "SCRAM-SHA-512", hash: sha512.New, user: username, pass: password}, nil
	}
	return nil, fmt.Errorf("kafkaclient: unknown SASL mechanism %q (want plain, scram-sha-256 or scram-sha-512)", mechanism)
}

// scram is a SCRAM client (RFC 5802, RFC 7677) without channel binding, as Kafka speaks it.
type scram struct {
	name       string
	hash       func() hash.Hash
	user, pass string
	nonce      func() string // tests pin it to check against the RFC's example exchange
}

func (m *scram) Name() string { return m.name }

// String keeps the password out of logs and %v.
func (m *scram) String() string { return m.name + "(" + m.user + ")" }

var scramUserEscaper = strings.NewReplacer("=", "=3D", ",", "=2C")

func (m *scram) Start(context.Context) (sasl.StateMachine, []byte, error) {
	nonce := m.nonce
	if nonce == nil {
		nonce = randomNonce
	}
	s := &scramSession{m: m, clientNonce: nonce()}
	s.clientFirstBare = "n=" + scramUserEscaper.Replace(m.user) + ",r=" + s.clientNonce
	return s, []byte("n,," + s.clientFirstBare), nil
}

func randomNonce() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go ≥ 1.24)
	return base64.RawStdEncoding.EncodeToString(b)
}

type scramSession struct {
	m               *scram
	clientNonce     string
	clientFirstBare string
	serverSignature []byte // expected in server-final; set once client-final is sent
}

// scramMaxIterations refuses a hostile or broken server's request to spin the CPU for minutes; Kafka
// allows 4096–16384.
const scramMaxIterations = 1 << 20

func (s *scramSession) Next(_ context.Context, challenge []byte) (bool, []byte, error) {
	if s.serverSignature != nil {
		return true, nil, s.verifyServerFinal(challenge)
	}
	resp, err := s.clientFinal(challenge)
	return false, resp, err
}

// clientFinal answers server-first-message "r=<nonce>,s=<salt>,i=<iterations>" with the proof.
func (s *scramSession) clientFinal(serverFirst []byte) ([]byte, error) {
	var nonce, salt64, iter string
	for i, attr := range strings.Split(string(serverFirst), ",") {
		if len(attr) < 2 || attr[1] != '=' {
			return nil, fmt.Errorf("kafkaclient: SCRAM: malformed server-first-message")
		}
		switch v := attr[2:]; {
		case i == 0 && attr[0] == 'm':
			return nil, fmt.Errorf("kafkaclient: SCRAM: server requires an unsupported extension")
		case attr[0] == 'r':
			nonce = v
		case attr[0] == 's':
			salt64 = v
		case attr[0] == 'i':
			iter = v
		case attr[0] == 'e':
			return nil, fmt.Errorf("kafkaclient: SCRAM: server error %q", v)
		}
	}
	if !strings.HasPrefix(nonce, s.clientNonce) || len(nonce) == len(s.clientNonce) {
		return nil, fmt.Errorf("kafkaclient: SCRAM: server nonce does not extend ours")
	}
	salt, err := base64.StdEncoding.DecodeString(salt64)
	if err != nil || len(salt) == 0 {
		return nil, fmt.Errorf("kafkaclient: SCRAM: bad salt")
	}
	iterations, err := strconv.Atoi(iter)
	if err != nil || iterations < 1 || iterations > scramMaxIterations {
		return nil, fmt.Errorf("kafkaclient: SCRAM: bad iteration count %q", iter)
	}

	h := s.m.hash
	salted, err := pbkdf2.Key(h, s.m.pass, salt, iterations, h().Size())
	if err != nil {
		return nil, fmt.Errorf("kafkaclient: SCRAM: %w", err)
	}
	clientKey := hmacSum(h, salted, []byte("Client Key"))
	storedKey := h()
	storedKey.Write(clientKey)

	finalWithoutProof := "c=biws,r=" + nonce // biws = base64("n,,"): no channel binding, no authzid
	authMessage := []byte(s.clientFirstBare + "," + string(serverFirst) + "," + finalWithoutProof)
	proof := hmacSum(h, storedKey.Sum(nil), authMessage)
	for i := range proof {
		proof[i] ^= clientKey[i]
	}
	s.serverSignature = hmacSum(h, hmacSum(h, salted, []byte("Server Key")), authMessage)
	return []byte(finalWithoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)), nil
}

// verifyServerFinal checks "v=<signature>": only a server that knows the credentials can produce it, so
// this is what stops an impostor broker from accepting us.
func (s *scramSession) verifyServerFinal(serverFinal []byte) error {
	if v, ok := bytes.CutPrefix(serverFinal, []byte("e=")); ok {
		return fmt.Errorf("kafkaclient: SCRAM: server error %q", v)
	}
	v, ok := bytes.CutPrefix(serverFinal, []byte("v="))
	if !ok {
		return errors.New("kafkaclient: SCRAM: malformed server-final-message")
	}
	if i := bytes.IndexByte(v, ','); i >= 0 { // extensions may follow
		v = v[:i]
	}
	sig, err := base64.StdEncoding.DecodeString(string(v))
	if err != nil || !hmac.Equal(sig, s.serverSignature) {
		return errors.New("kafkaclient: SCRAM: server signature does not match; the broker does not know our credentials")
	}
	return nil
}

func hmacSum(h func() hash.Hash, key, msg []byte) []byte {
	mac := hmac.New(h, key)
	mac.Write(msg)
	return mac.Sum(nil)
}
