package redisutil

import (
	"context"
	"errors"
	"slices"

	"github.com/redis/go-redis/v9"
)

// ScriptCall is one call of a script: its keys and arguments.
type ScriptCall struct {
	Keys []string
	Args []any
}

// RunAll runs script once per call in one pipeline. Scripts are sent by hash; when Redis lost them (a
// restart, a failover) they are loaded and the calls Redis refused are sent again, so callers never see
// NOSCRIPT. Only those: on Redis Cluster the nodes that still had the script have run their calls, and
// a claim run twice would hand its first run's devices to nobody until their lease ran out.
func RunAll(ctx context.Context, rdb redis.Cmdable, script *redis.Script, calls []ScriptCall) ([]*redis.Cmd, error) {
	scripts := make([]*redis.Script, len(calls))
	for i := range scripts {
		scripts[i] = script
	}
	return RunScripts(ctx, rdb, scripts, calls, nil)
}

// RunScripts is RunAll with call i running scripts[i]. When Redis refused some, every script of family
// is loaded, in its order, before those calls are sent again (nil family: the scripts refused), so that
// a family's later script is never there while an earlier one is missing (internal/deadline's claim
// steps).
func RunScripts(ctx context.Context, rdb redis.Cmdable, scripts []*redis.Script, calls []ScriptCall, family []*redis.Script) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	for attempt := 0; ; attempt++ {
		pipe := rdb.Pipeline()
		for _, i := range pending {
			cmds[i] = scripts[i].EvalSha(ctx, pipe, calls[i].Keys, calls[i].Args...)
		}
		_, err := pipe.Exec(ctx)
		if err == nil || errors.Is(err, redis.Nil) {
			break
		}
		var refused []int
		for _, i := range pending {
			if isNoScript(cmds[i]) {
				refused = append(refused, i)
			}
		}
		if attempt > 0 || len(refused) == 0 {
			break
		}
		load := family
		if load == nil {
			for _, i := range refused {
				if !slices.Contains(load, scripts[i]) {
					load = append(load, scripts[i])
				}
			}
		}
		for _, script := range load {
			if err := script.Load(ctx, rdb).Err(); err != nil {
				return nil, err
			}
		}
		pending = refused
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return cmds, err
		}
	}
	return cmds, nil
}

func isNoScript(cmd *redis.Cmd) bool { return redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") }
