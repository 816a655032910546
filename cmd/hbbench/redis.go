package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is the redis-server hbbench starts for itself on a free loopback port.
type redisServer struct {
	addr    string
	version string
	cmd     *exec.Cmd
	dir     string
	client  *redis.Client
}

func startRedis(ctx context.Context) (*redisServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "hbbench-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server (apt-get install redis-server): %w", err)
	}
	s := &redisServer{addr: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd, dir: dir}
	s.client = redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: 64})
	deadline := time.Now().Add(10 * time.Second)
	for s.client.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer", s.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	info, _ := s.client.Info(ctx, "server").Result()
	if m := regexp.MustCompile(`redis_version:(\S+)`).FindStringSubmatch(info); m != nil {
		s.version = "Redis " + m[1]
	}
	return s, nil
}

func (s *redisServer) flush(ctx context.Context) error { return s.client.FlushAll(ctx).Err() }

func (s *redisServer) stop() {
	s.client.Close()
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	os.RemoveAll(s.dir)
}

func (s *redisServer) usedMemory(ctx context.Context) (int64, error) {
	info, err := s.client.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "used_memory:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO")
}

// redisBenchmark runs redis-benchmark against the server and returns its requests/s.
func (s *redisServer) redisBenchmark(args ...string) (float64, error) {
	host, port, _ := strings.Cut(s.addr, ":")
	out, err := exec.Command("redis-benchmark", append([]string{"-h", host, "-p", port, "-q"}, args...)...).Output()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: %w", err)
	}
	m := regexp.MustCompile(`([0-9.]+) requests per second`).FindStringSubmatch(string(out))
	if m == nil {
		return 0, fmt.Errorf("redis-benchmark output not understood: %q", out)
	}
	return strconv.ParseFloat(m[1], 64)
}
