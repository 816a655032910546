package main

import (
	"bufio"
	"context"
	"fmt"
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
	proc    *child
	client  *redis.Client
}

func startRedis(ctx context.Context) (*redisServer, error) {
	path, err := findBinary("redis-server")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "hbbench-redis-")
	if err != nil {
		return nil, err
	}
	proc, err := startChild("redis-server", path, []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}, nil, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &redisServer{addr: fmt.Sprintf("127.0.0.1:%d", port), proc: proc}
	s.client = redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: 64})
	if err := proc.waitReady(ctx, 10*time.Second, func() error { return s.client.Ping(ctx).Err() }); err != nil {
		s.stop()
		return nil, err
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
	s.proc.stop(10 * time.Second)
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
func (s *redisServer) redisBenchmark(ctx context.Context, args ...string) (float64, error) {
	path, err := findBinary("redis-benchmark")
	if err != nil {
		return 0, err
	}
	host, port, _ := strings.Cut(s.addr, ":")
	cmd := exec.CommandContext(ctx, path, append([]string{"-h", host, "-p", port, "-q"}, args...)...)
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: %w", err)
	}
	m := regexp.MustCompile(`([0-9.]+) requests per second`).FindStringSubmatch(string(out))
	if m == nil {
		return 0, fmt.Errorf("redis-benchmark output not understood: %q", out)
	}
	return strconv.ParseFloat(m[1], 64)
}
