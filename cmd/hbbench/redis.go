package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// redisServer is the redis-server hbbench starts for itself on a free loopback port, with a client whose
// pool has room for every load worker.
type redisServer struct {
	*testenv.Redis
	version string
	client  *redis.Client
}

func startRedis(ctx context.Context) (*redisServer, error) {
	srv, err := testenv.LaunchRedis(ctx, "", testenv.RedisOptions{})
	if err != nil {
		return nil, err
	}
	s := &redisServer{Redis: srv, client: redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})}
	info, _ := s.client.Info(ctx, "server").Result()
	if m := regexp.MustCompile(`redis_version:(\S+)`).FindStringSubmatch(info); m != nil {
		s.version = "Redis " + m[1]
	}
	return s, nil
}

func (s *redisServer) flush(ctx context.Context) error { return s.client.FlushAll(ctx).Err() }

func (s *redisServer) stop() {
	s.client.Close()
	s.Close()
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
	return 0, fmt.Errorf("hbbench: no used_memory in INFO")
}

// redisBenchmark runs redis-benchmark against the server and returns its requests/s.
func (s *redisServer) redisBenchmark(ctx context.Context, args ...string) (float64, error) {
	path, err := testenv.LookPath("redis-benchmark")
	if err != nil {
		return 0, err
	}
	host, port, _ := strings.Cut(s.Addr, ":")
	cmd := exec.CommandContext(ctx, path, append([]string{"-h", host, "-p", port, "-q"}, args...)...)
	cmd.SysProcAttr = testenv.SysProcAttr()
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("hbbench: redis-benchmark: %w", err)
	}
	m := regexp.MustCompile(`([0-9.]+) requests per second`).FindStringSubmatch(string(out))
	if m == nil {
		return 0, fmt.Errorf("hbbench: redis-benchmark output not understood: %q", out)
	}
	return strconv.ParseFloat(m[1], 64)
}
