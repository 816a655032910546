package kafkaclient

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// startSCRAM starts a SCRAM exchange of mechanism as user "user" with password "pencil" (RFC 7677's
// example) and the client nonce pinned to nonce; it returns the session and the client-first message.
func startSCRAM(t *testing.T, mechanism, nonce string) (*scramSession, []byte) {
	t.Helper()
	mech, err := SASLMechanism(mechanism, "user", "pencil")
	require.NoError(t, err)
	m := mech.(*scram)
	m.nonce = func() string { return nonce }
	sess, first, err := m.Start(context.Background())
	require.NoError(t, err)
	return sess.(*scramSession), first
}

// The example exchange of RFC 7677 §3 (SCRAM-SHA-256, user "user", password "pencil").
func TestSCRAMRFC7677Exchange(t *testing.T) {
	sess, first := startSCRAM(t, "SCRAM-SHA-256", "rOprNGfwEbeRWgbNEkqO")
	require.Equal(t, "n,,n=user,r=rOprNGfwEbeRWgbNEkqO", string(first))

	done, final, err := sess.Next(context.Background(),
		[]byte("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"))
	require.NoError(t, err)
	require.False(t, done)
	require.Equal(t, "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"+
		"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", string(final))

	done, _, err = sess.Next(context.Background(), []byte("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="))
	require.NoError(t, err)
	require.True(t, done)
}

func TestSCRAMRejectsBadServer(t *testing.T) {
	tests := []struct {
		name        string
		serverFirst string
		serverFinal string // checked only when serverFirst is accepted
	}{
		{"nonce not ours", "r=xyz123,s=c2FsdA==,i=4096", ""},
		{"nonce not extended", "r=abc,s=c2FsdA==,i=4096", ""},
		{"bad salt", "r=abcdef,s=!!,i=4096", ""},
		{"absurd iterations", "r=abcdef,s=c2FsdA==,i=999999999", ""},
		{"server error", "e=other-error", ""},
		{"mandatory extension", "m=ext,r=abcdef,s=c2FsdA==,i=4096", ""},
		{"wrong server signature", "r=abcdef,s=c2FsdA==,i=4096", "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="},
		{"server final error", "r=abcdef,s=c2FsdA==,i=4096", "e=invalid-proof"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess, _ := startSCRAM(t, "scram-sha-256", "abc")
			ctx := context.Background()
			_, _, err := sess.Next(ctx, []byte(tt.serverFirst))
			if tt.serverFinal == "" {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			_, _, err = sess.Next(ctx, []byte(tt.serverFinal))
			require.Error(t, err)
		})
	}
}

func TestSASLMechanismNames(t *testing.T) {
	m, err := SASLMechanism("", "u", "p")
	require.NoError(t, err)
	require.Nil(t, m)
	for name, want := range map[string]string{"plain": "PLAIN", "PLAIN": "PLAIN", "scram-sha-256": "SCRAM-SHA-256", "Scram-Sha-512": "SCRAM-SHA-512"} {
		m, err := SASLMechanism(name, "u", "p")
		require.NoError(t, err)
		require.Equal(t, want, m.Name())
	}
	_, err = SASLMechanism("gssapi", "u", "p")
	require.ErrorContains(t, err, "kafkaclient: unknown SASL mechanism")
}

// Every mechanism internal/config accepts builds.
func TestSASLMechanismOfEveryConfigName(t *testing.T) {
	for _, name := range []string{config.SASLNone, config.SASLPlain, config.SASLScramSHA256, config.SASLScramSHA512} {
		_, err := SASLMechanism(name, "u", "p")
		require.NoError(t, err, name)
	}
}

// Escaping of ',' and '=' in the user name (RFC 5802 saslname).
func TestSCRAMEscapesUser(t *testing.T) {
	mech, err := SASLMechanism("scram-sha-512", "a,b=c", "p")
	require.NoError(t, err)
	_, first, err := mech.Start(context.Background())
	require.NoError(t, err)
	require.Regexp(t, `^n,,n=a=2Cb=3Dc,r=[A-Za-z0-9+/]{32}$`, string(first))
}
