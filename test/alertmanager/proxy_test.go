package alertmanager

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// proxy stands between heartbeatd and Alertmanager so a test can make Alertmanager unreachable without
// losing what it holds: cut closes every connection and refuses new ones until restore. (A paused
// Alertmanager would still read the requests waiting in its socket once resumed.)
type proxy struct {
	ln     net.Listener
	target string
	down   atomic.Bool
	mu     sync.Mutex
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

// URL is the proxy's address as an Alertmanager base URL.
func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.pipe(c)
	}
}

func (p *proxy) pipe(c net.Conn) {
	defer p.wg.Done()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c, u) {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
	<-done
	_, _ = c.Close(), u.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

// track registers a connection pair, or closes it when the proxy was cut meanwhile.
func (p *proxy) track(c, u net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down.Load() {
		_, _ = c.Close(), u.Close()
		return false
	}
	p.conns[c], p.conns[u] = true, true
	return true
}

// cut closes every connection and refuses new ones.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down.Store(true)
	for c := range p.conns {
		_ = c.Close()
	}
}

// restore lets connections through again.
func (p *proxy) restore() { p.down.Store(false) }
