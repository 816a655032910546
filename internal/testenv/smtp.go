package testenv

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SMTPOptions configures StartSMTP. The server requires STARTTLS (with the certificate given) before
// anything else, and AUTH with User and Password before MAIL.
type SMTPOptions struct {
	CertFile, KeyFile string
	User, Password    string
}

// SMTP is a real SMTP server: aiosmtpd (Debian package python3-aiosmtpd) run by the Python that its
// `aiosmtpd` command names, with a small handler that keeps every message it accepted as a JSON file.
// A recipient starting with "reject" is refused for good (550), one starting with "later" for now (451).
type SMTP struct {
	Addr string // "127.0.0.1:port"

	opts SMTPOptions
	port int
	*server
}

// Mail is one accepted message.
type Mail struct {
	From string   `json:"from"`
	To   []string `json:"to"`
	Data string   `json:"data"`
	// TLS and Auth say the session had gone through STARTTLS and AUTH when the message came.
	TLS  bool `json:"tls"`
	Auth bool `json:"auth"`
}

// smtpHandler is the aiosmtpd program: argv port, mail directory, cert, key, user, password.
const smtpHandler = `import json, os, signal, ssl, sys, threading, time
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

port, maildir, cert, key, user, password = sys.argv[1:7]

class Handler:
    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith('reject'):
            return '550 5.1.1 mailbox unavailable'
        if address.startswith('later'):
            return '451 4.3.0 try again later'
        envelope.rcpt_tos.append(address)
        return '250 OK'

    async def handle_DATA(self, server, session, envelope):
        n = time.time_ns()
        rec = {'from': envelope.mail_from, 'to': envelope.rcpt_tos,
               'data': envelope.content.decode('utf-8', 'replace'),
               'tls': session.ssl is not None, 'auth': bool(session.authenticated)}
        tmp = os.path.join(maildir, '.%d.tmp' % n)
        with open(tmp, 'w') as f:
            json.dump(rec, f)
        os.rename(tmp, os.path.join(maildir, '%d.json' % n))
        return '250 Message accepted for delivery'

def authenticator(server, session, envelope, mechanism, auth_data):
    ok = isinstance(auth_data, LoginPassword) and auth_data.login.decode() == user and auth_data.password.decode() == password
    return AuthResult(success=ok, handled=False)

ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.load_cert_chain(cert, key)
controller = Controller(Handler(), hostname='127.0.0.1', port=int(port), ready_timeout=20,
                        tls_context=ctx, require_starttls=True, authenticator=authenticator,
                        auth_required=True, auth_require_tls=True)
controller.start()
print('smtp ready on', port, flush=True)
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: done.set())
done.wait()
controller.stop()
`

// LaunchSMTP is StartSMTP without a test (see the package comment for dir).
func LaunchSMTP(ctx context.Context, dir string, opts SMTPOptions) (*SMTP, error) {
	python, err := aiosmtpdPython()
	if err != nil {
		return nil, err
	}
	srv, err := newServerAt("aiosmtpd", python, dir, "smtp.log")
	if err != nil {
		return nil, err
	}
	s := &SMTP{opts: opts, server: srv}
	s.probe = s.greets
	return s, s.firstLaunch(ctx, func() error {
		if s.port, err = freePort(); err != nil {
			return err
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		script := filepath.Join(s.dir, "smtpd.py")
		if err := os.WriteFile(script, []byte(smtpHandler), 0o644); err != nil {
			return err
		}
		if err := os.MkdirAll(s.mailDir(), 0o755); err != nil {
			return err
		}
		s.args = []string{script, strconv.Itoa(s.port), s.mailDir(), opts.CertFile, opts.KeyFile, opts.User, opts.Password}
		return nil
	})
}

// aiosmtpdPython is the interpreter of the `aiosmtpd` command (its #! line): the one that has the module.
func aiosmtpdPython() (string, error) {
	cmd, err := LookPath("aiosmtpd")
	if err != nil {
		return "", err
	}
	f, err := os.Open(cmd)
	if err != nil {
		return "", err
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "#!"))
	if len(fields) == 0 || !strings.HasPrefix(line, "#!") {
		return "", fmt.Errorf("testenv: %s has no #! line naming its Python", cmd)
	}
	return fields[0], nil
}

func (s *SMTP) mailDir() string { return filepath.Join(s.dir, "mail") }

// greets answers nil once the server sends its 220 greeting.
func (s *SMTP) greets() error {
	conn, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "220") {
		return fmt.Errorf("greeting %q", line)
	}
	return nil
}

// MailCount is how many messages were accepted so far (cheaper than Mails, for polling).
func (s *SMTP) MailCount(tb testing.TB) int {
	tb.Helper()
	entries, err := os.ReadDir(s.mailDir())
	if err != nil {
		tb.Fatalf("testenv: smtp mails: %v", err)
	}
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			n++
		}
	}
	return n
}

// Mails is every message accepted so far, in the order they came.
func (s *SMTP) Mails(tb testing.TB) []Mail {
	tb.Helper()
	entries, err := os.ReadDir(s.mailDir())
	if err != nil {
		tb.Fatalf("testenv: smtp mails: %v", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names) // nanosecond names of one width until 2286
	out := make([]Mail, 0, len(names))
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(s.mailDir(), n))
		if err != nil {
			tb.Fatalf("testenv: smtp mail %s: %v", n, err)
		}
		var m Mail
		if err := json.Unmarshal(b, &m); err != nil {
			tb.Fatalf("testenv: smtp mail %s: %v", n, err)
		}
		out = append(out, m)
	}
	return out
}

// StartSMTP starts the SMTP server on a free port with a certificate of GenerateTLS and the account
// heartbeatd / smtp-secret unless opts say otherwise; tb.Cleanup stops it. It returns the TLS files, whose
// CA a client must trust.
func StartSMTP(tb testing.TB, opts ...SMTPOptions) (*SMTP, *TLSFiles) {
	tb.Helper()
	var o SMTPOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	files := GenerateTLS(tb)
	if o.CertFile == "" {
		o.CertFile, o.KeyFile = files.CertFile, files.KeyFile
	}
	if o.User == "" {
		o.User, o.Password = "heartbeatd", "smtp-secret"
	}
	return start(tb, LaunchSMTP, []SMTPOptions{o}), files
}
