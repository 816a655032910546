package deadline

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/redisutil"
)

// The Go side of a claim's reply (claim.go): decoding it and turning each slot's lists into claims.

// appendClaims appends one slot's claims from its reply r: the committed fresh claims, the claims of
// expired records handed out again (no longer fresh), the replacing ones and the due entries, each with
// its incident's cause when it has one.
func (s *Store) appendClaims(ctx context.Context, claims []Claim, slot int, r claimReply, record string, repeats typeTable) ([]Claim, error) {
	start := len(claims)
	for k, pairs := range [][]string{r.committed, r.again} {
		for j := 0; j < len(pairs); j += 2 {
			if strings.Contains(pairs[j+1], stateSep) { // a suppression's record handed out again
				c, err := s.suppressionClaim(ctx, slot, pairs[j], pairs[j+1], record)
				if err != nil {
					return claims, err
				}
				claims = append(claims, c)
				continue
			}
			c, err := s.freshClaim(ctx, slot, pairs[j], pairs[j+1], "")
			if err != nil {
				return claims, err
			}
			c.Fresh, c.Record, c.CommittedRepeat = k == 0, record, repeats.of(c.State.TypeIndex)
			claims = append(claims, c)
		}
	}
	for j := 0; j < len(r.replacing); j += 3 {
		c, err := s.freshClaim(ctx, slot, r.replacing[j], r.replacing[j+1], r.replacing[j+2])
		if err != nil {
			return claims, err
		}
		claims = append(claims, c)
	}
	for j := 0; j < len(r.due); j += 2 {
		c, err := s.dueClaim(ctx, slot, r.due[j], r.due[j+1])
		if err != nil {
			return claims, err
		}
		claims = append(claims, c)
	}
	attachCauses(claims[start:], r.causes)
	for i := start; i < len(claims); i++ {
		claims[i].LastSignal = s.lastSignalOf(ctx, claims[i].State.TypeIndex, claims[i].State.Deadline)
	}
	return claims, nil
}

// freshClaim reads a fresh claim: device, deadlines-set score, replaced state ("" when none).
func (s *Store) freshClaim(ctx context.Context, slot int, device, score, prev string) (Claim, error) {
	st, err := stateOfScore(score)
	if err != nil {
		return Claim{}, fmt.Errorf("deadline: claim slot %d: device %q: %w", slot, device, err)
	}
	c := Claim{Device: device, Slot: slot, State: st, Fresh: true}
	if c.Type, c.OwnTimeout, err = s.claimTypeOf(ctx, st.TypeIndex); err != nil {
		return Claim{}, err
	}
	if prev != "" {
		p, err := decodeState(prev)
		if err != nil {
			return Claim{}, err
		}
		c.Replaced = &p
		c.State = c.State.owing(p) // as the script stored it
	}
	return c, nil
}

// suppressionClaim reads a committed suppression (wake.go): device, the committed state. The claim is
// handed out as the waiting incident it was, nothing sent, as a committed fresh claim is: its deadline
// and type, all the rest zero, so only those two fields are read.
func (s *Store) suppressionClaim(ctx context.Context, slot int, device, state, record string) (Claim, error) {
	f := strings.SplitN(state, stateSep, fieldNext+2) // the fields up to next, and the rest
	var deadline int64
	var index int
	var err, terr error
	if len(f) > fieldNext {
		deadline, err = strconv.ParseInt(f[fieldDeadline], 10, 64)
		index, terr = strconv.Atoi(f[fieldType])
	}
	if len(f) <= fieldNext || err != nil || terr != nil || f[fieldNext] != "1" {
		return Claim{}, fmt.Errorf("deadline: claim slot %d: device %q: %q is not a committed suppression", slot, device, state)
	}
	c := Claim{Device: device, Slot: slot, State: State{Deadline: deadline, TypeIndex: index}, Record: record, CommittedSuppression: true}
	if c.Type, c.OwnTimeout, err = s.claimTypeOf(ctx, index); err != nil {
		return Claim{}, err
	}
	return c, nil
}

// dueClaim reads a due alarm entry's claim: device, state.
func (s *Store) dueClaim(ctx context.Context, slot int, device, state string) (Claim, error) {
	st, err := decodeState(state)
	if err != nil {
		return Claim{}, err
	}
	c := Claim{Device: device, Slot: slot, State: st}
	if c.Type, c.OwnTimeout, err = s.claimTypeOf(ctx, st.TypeIndex); err != nil {
		return Claim{}, err
	}
	return c, nil
}

func earliest(a, b int64) int64 {
	if a < 0 || (b >= 0 && b < a) {
		return b
	}
	return a
}

// claimReply is one slot's claim, decoded from its steps' replies by decodeClaimReply: the flat lists
// hold whole pairs and triples, so they can be indexed without further checks.
type claimReply struct {
	nextDeadline, nextAlarm int64 // ms; -1 when none
	more                    bool
	committed, again        []string // pairs: device, deadlines-set score
	replacing               []string // triples: device, deadlines-set score, replaced state
	due                     []string // pairs: device, state
	causes                  []string // pairs: device, stored cause
}

// claimStepReplies are the replies of one slot's claim steps (claimsteps.go) as go-redis returns them;
// held is nil when that step did not run.
type claimStepReplies struct{ held, fresh, due, next any }

// stepReplies picks one slot's step replies out of its commands, run in claimSteps order.
func stepReplies(cmds []*redis.Cmd, held bool) claimStepReplies {
	var r claimStepReplies
	if held {
		r.held, cmds = cmds[0].Val(), cmds[1:]
	}
	r.fresh, r.due, r.next = cmds[0].Val(), cmds[1].Val(), cmds[2].Val()
	return r
}

// decodeClaimReply reads one slot's step replies. The fresh claims are the fresh step's, then the held
// one's; the slot has more when the two took batch members, or batch alarm entries were due.
func decodeClaimReply(steps claimStepReplies, batch int) (claimReply, error) {
	var out claimReply
	taken, err := decodeFreshReply(&out, "claim fresh", steps.fresh)
	if err != nil {
		return claimReply{}, err
	}
	if steps.held != nil {
		n, err := decodeFreshReply(&out, "claim held", steps.held)
		if err != nil {
			return claimReply{}, err
		}
		taken += n
	}
	r := redisutil.ReplyReader{Script: "deadline: claim due"}
	f := r.Fields(steps.due, 4)
	if r.Err != nil {
		return claimReply{}, r.Err
	}
	full := r.Int(f[0], "full") == 1
	out.again = r.Packed(f[1], "again", packSep, 2)
	out.due = r.Strings(f[2], "due", 2)
	out.causes = joined(out.causes, r.Strings(f[3], "causes", 2))
	if r.Err != nil {
		return claimReply{}, r.Err
	}
	r = redisutil.ReplyReader{Script: "deadline: claim next"}
	f = r.Fields(steps.next, 2)
	if r.Err != nil {
		return claimReply{}, r.Err
	}
	out.nextDeadline, out.nextAlarm = r.Int(f[0], "next deadline"), r.Int(f[1], "next alarm")
	out.more = full || taken >= int64(batch)
	return out, r.Err
}

// decodeFreshReply appends a fresh or held step's reply v to out and returns how many members it took.
func decodeFreshReply(out *claimReply, script string, v any) (int64, error) {
	r := redisutil.ReplyReader{Script: "deadline: " + script}
	f := r.Fields(v, 4)
	if r.Err != nil {
		return 0, r.Err
	}
	taken := r.Int(f[0], "taken")
	out.committed = joined(out.committed, r.Packed(f[1], "committed", packSep, 2))
	out.replacing = joined(out.replacing, r.Strings(f[2], "replacing", 3))
	out.causes = joined(out.causes, r.Strings(f[3], "causes", 2))
	return taken, r.Err
}

// joined is a then b, without copying either when the other is empty (most often, one step has claims).
func joined(a, b []string) []string {
	if len(a) == 0 {
		return b
	}
	return append(a, b...)
}
