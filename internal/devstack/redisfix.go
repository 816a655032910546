package devstack

import (
	"strconv"
	"strings"

	"github.com/alicebob/miniredis/v2/server"
)

// zaddInOrder makes miniredis apply a ZADD that names one member more than once the way Redis does: one
// member after the other. miniredis (v2.40) collects the pairs in a map first, so the last occurrence wins
// and GT/LT only compare it with the stored score: `ZADD k GT 6 m 5 m` on a new member stores 5 where
// Redis stores 6. heartbeatd's refresh script sends one ZADD GT per slot with every signal of a batch,
// so a device that signalled twice in one batch, the newer signal first, would get the older deadline and
// could be reported silent early.
//
// The hook reduces the repeated pairs to the one Redis would end with (GT: the highest score, LT: the
// lowest, NX: the first, otherwise the last) and dispatches the reduced command. It runs before every
// command, also the ones a Lua script calls. Anything unusual (INCR, a bad score) is left to miniredis.
// Left as it is: ZADD CH then counts a member changed twice once, where Redis counts it twice; heartbeatd
// never sends that.
func zaddInOrder(srv *server.Server) server.Hook {
	return func(c *server.Peer, cmd string, args ...string) bool {
		if cmd != "ZADD" || len(args) < 5 {
			return false
		}
		i := 1
		var gt, lt, nx bool
	opts:
		for ; i < len(args); i++ {
			switch strings.ToUpper(args[i]) {
			case "GT":
				gt = true
			case "LT":
				lt = true
			case "NX":
				nx = true
			case "XX", "CH":
			case "INCR":
				return false
			default:
				break opts
			}
		}
		pairs := args[i:]
		if len(pairs) < 4 || len(pairs)%2 != 0 {
			return false
		}
		type entry struct {
			pos   int
			score float64
			raw   string
		}
		seen := make(map[string]*entry, len(pairs)/2)
		order := make([]string, 0, len(pairs)/2)
		for j := 0; j < len(pairs); j += 2 {
			score, err := strconv.ParseFloat(pairs[j], 64)
			if err != nil {
				return false
			}
			m := pairs[j+1]
			e, dup := seen[m]
			switch {
			case !dup:
				seen[m] = &entry{pos: len(order), score: score, raw: pairs[j]}
				order = append(order, m)
			case gt && score > e.score, lt && score < e.score, !gt && !lt && !nx:
				e.score, e.raw = score, pairs[j]
			}
		}
		if len(order) == len(pairs)/2 {
			return false // no member twice: nothing to fix
		}
		reduced := make([]string, 0, 1+i+2*len(order))
		reduced = append(reduced, "ZADD")
		reduced = append(reduced, args[:i]...)
		for _, m := range order {
			reduced = append(reduced, seen[m].raw, m)
		}
		srv.Dispatch(c, reduced)
		return true
	}
}
