package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// child is a server process hbbench started, in its own temporary directory with its output in a log
// file there. stop ends it by its PID and removes the directory.
type child struct {
	name    string
	cmd     *exec.Cmd
	dir     string
	logPath string
	done    chan struct{}
}

func startChild(name, path string, args, env []string, dir string) (*child, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	// The child keeps its own copy of the descriptor.
	defer logf.Close()
	cmd := exec.Command(path, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("hbbench: start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, dir: dir, logPath: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, kills after timeout, waits for the exit and removes the directory.
func (c *child) stop(timeout time.Duration) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	os.RemoveAll(c.dir)
}

// logTail is the end of the child's log, for error messages.
func (c *child) logTail() string {
	b, _ := os.ReadFile(c.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// waitReady polls probe until it answers nil, the child exits, or timeout passes.
func (c *child) waitReady(ctx context.Context, timeout time.Duration, probe func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := probe()
		if err == nil {
			return nil
		}
		if c.exited() {
			return fmt.Errorf("hbbench: %s exited: %v\n%s", c.name, err, c.logTail())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.Join(fmt.Errorf("hbbench: %s not ready after %s: %w", c.name, timeout, err), ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// findBinary looks on PATH and in the sbin directories, where Debian installs mosquitto.
func findBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
		if p, err := exec.LookPath(filepath.Join(dir, name)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("hbbench: %s not found on PATH nor in the sbin directories", name)
}

// mosquittoServer is a mosquitto hbbench starts for the MQTT ingest scenario, configured like
// internal/testenv: the default queue limits (1000 queued per client) silently drop a QoS 1 backlog.
type mosquittoServer struct {
	addr    string // tcp://127.0.0.1:port
	version string
	proc    *child
}

func startMosquitto(ctx context.Context) (*mosquittoServer, error) {
	path, err := findBinary("mosquitto")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "hbbench-mosquitto-")
	if err != nil {
		return nil, err
	}
	var conf strings.Builder
	if os.Geteuid() == 0 {
		// As root mosquitto would switch to the "mosquitto" user, which cannot write our directory.
		conf.WriteString("user root\n")
	}
	fmt.Fprintf(&conf, "allow_anonymous true\nset_tcp_nodelay true\npersistence false\n"+
		"max_queued_messages 10000000\nmax_queued_bytes 0\nmax_inflight_messages 1000\nmax_inflight_bytes 0\n"+
		"log_dest stderr\nlistener %d 127.0.0.1\n", port)
	confPath := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	proc, err := startChild("mosquitto", path, []string{"-c", confPath}, nil, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	m := &mosquittoServer{addr: "tcp://127.0.0.1:" + strconv.Itoa(port), proc: proc}
	if err := proc.waitReady(ctx, 20*time.Second, func() error {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			conn.Close()
		}
		return err
	}); err != nil {
		proc.stop(5 * time.Second)
		return nil, err
	}
	if out, err := exec.Command(path, "-h").Output(); err == nil || len(out) > 0 {
		line, _, _ := strings.Cut(string(out), "\n")
		m.version = strings.TrimSpace(line)
	}
	return m, nil
}

func (m *mosquittoServer) stop() { m.proc.stop(10 * time.Second) }

// kafkaBroker is an in-process kfake cluster of one broker with the topics created up front.
type kafkaBroker struct {
	addrs   []string
	cluster *kfake.Cluster
}

// kafkaSegmentBytes rolls kfake's in-memory log segments at 1 MiB instead of Kafka's 100 MiB default:
// kfake grows a segment by copying it whole, which took 10% of hbbench's CPU at 1M events (a real broker
// appends to the page cache), and the detection figures are heartbeatd's, not the test broker's.
const kafkaSegmentBytes = "1048576"

func startKafka(partitions int, topics ...string) (*kafkaBroker, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), topics...),
		kfake.BrokerConfigs(map[string]string{"log.segment.bytes": kafkaSegmentBytes}))
	if err != nil {
		return nil, fmt.Errorf("hbbench: start kfake: %w", err)
	}
	return &kafkaBroker{addrs: c.ListenAddrs(), cluster: c}, nil
}

func (k *kafkaBroker) stop() { k.cluster.Close() }

// procStatus reads fields of /proc/pid/status in kB (VmRSS, VmHWM).
func procStatus(pid int, fields ...string) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		for _, want := range fields {
			if k == want {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				if err != nil {
					return nil, fmt.Errorf("hbbench: %s: %q: %w", k, v, err)
				}
				out[k] = kb
			}
		}
	}
	return out, sc.Err()
}
