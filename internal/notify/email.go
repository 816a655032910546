package notify

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/smtp"
	"net/textproto"
	"strings"
	"text/template"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// email sends through an SMTP smarthost: STARTTLS whenever offered (required with credentials), then
// PLAIN authentication (net/smtp refuses it in clear).
type email struct {
	name, addr, host string
	from             string
	to               []string
	username         string
	password         string
	tls              *tls.Config
	timeout          time.Duration
	subject, body    *template.Template
}

func newEmail(key string, r config.NotifyReceiver, now func() time.Time) (*email, error) {
	e := r.Email
	subject, err := parseTemplate(key+".email.subject", e.Subject, defaultText, now)
	if err != nil {
		return nil, err
	}
	body, err := parseTemplate(key+".email.body", e.Body, defaultEmailBody, now)
	if err != nil {
		return nil, err
	}
	host, _, _ := net.SplitHostPort(e.Smarthost)
	tlsCfg, err := e.TLS.Build()
	if err != nil {
		return nil, fmt.Errorf("notify: %s.email.tls: %w", key, err)
	}
	if tlsCfg == nil {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if tlsCfg.ServerName == "" {
		tlsCfg.ServerName = host
	}
	return &email{name: r.Name, addr: e.Smarthost, host: host, from: e.From, to: e.To, username: e.Username,
		password: e.Password, tls: tlsCfg, timeout: r.DeliveryTimeout(), subject: subject, body: body}, nil
}

func (e *email) Name() string { return e.name }

func (e *email) Send(ctx context.Context, d *Data) error {
	subject, err := render(e.subject, d)
	if err != nil {
		return &DeliveryError{Answer: err.Error(), Permanent: true}
	}
	body, err := render(e.body, d)
	if err != nil {
		return &DeliveryError{Answer: err.Error(), Permanent: true}
	}
	msg := e.message(strings.Join(strings.Fields(subject), " "), body)
	return smtpError(e.deliver(ctx, msg))
}

// message is an RFC 5322 message with a UTF-8 plain text body.
func (e *email) message(subject, body string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "From: %s\r\nTo: %s\r\nSubject: %s\r\nDate: %s\r\nMessage-ID: <%s@heartbeatd>\r\n",
		e.from, strings.Join(e.to, ", "), mime.QEncoding.Encode("utf-8", subject), time.Now().Format(time.RFC1123Z), rand.Text())
	b.WriteString("MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n")
	b.WriteString(strings.ReplaceAll(strings.ReplaceAll(body, "\r\n", "\n"), "\n", "\r\n"))
	return b.Bytes()
}

func (e *email) deliver(ctx context.Context, msg []byte) error {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", e.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	c, err := smtp.NewClient(conn, e.host)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Hello("heartbeatd"); err != nil {
		return err
	}
	if ok, _ := c.Extension("STARTTLS"); ok {
		if err := c.StartTLS(e.tls); err != nil {
			return err
		}
	} else if e.username != "" {
		return &DeliveryError{Answer: "the server offers no STARTTLS: the credentials are not sent in clear", Permanent: true}
	}
	if e.username != "" {
		if err := c.Auth(smtp.PlainAuth("", e.username, e.password, e.host)); err != nil {
			return err
		}
	}
	if err := c.Mail(e.from); err != nil {
		return err
	}
	for _, to := range e.to {
		if err := c.Rcpt(to); err != nil {
			return err
		}
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write(msg); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return c.Quit()
}

// smtpError turns an SMTP reply into a *DeliveryError: 5xx is permanent, 4xx worth a retry.
func smtpError(err error) error {
	var te *textproto.Error
	if errors.As(err, &te) {
		return &DeliveryError{Status: te.Code, Answer: clip(te.Msg, maxAnswer), Permanent: te.Code >= 500}
	}
	return err
}
