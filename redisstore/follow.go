package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/reservation"
)

// This file is the store as the follower of the shops MySQL decides, and
// its side of the handoffs (docs/ownership.md, sections 3 and 4): the
// fence, the snapshot a handoff to MySQL copies, MySQL's change feed
// applied while MySQL decides, and the rewrite that rebuilds a shop from
// MySQL. (Package mirror drives all of it; nothing here is called
// "mirror", so that the one name means the one package.)

// Fence returns the shop's fence: reservation.NoFence (Redis decides)
// when the shop has none.
func (s *Store) Fence(ctx context.Context, shop int64) (reservation.Fence, error) {
	if err := validShop("shop", shop); err != nil {
		return reservation.Fence{}, err
	}
	v, err := s.client.Get(ctx, s.shopKeys(shop).fence()).Result()
	if errors.Is(err, redis.Nil) {
		return reservation.NoFence, nil
	}
	if err != nil {
		return reservation.Fence{}, fmt.Errorf("redisstore: fence of shop %d: %w", shop, err)
	}
	f, err := reservation.ParseFence(v)
	if err != nil {
		return reservation.Fence{}, fmt.Errorf("redisstore: fence of shop %d: %w", shop, err)
	}
	return f, nil
}

// Yield is the first step of a handoff from Redis to MySQL at epoch: if
// the shop's fence has a lower epoch, it becomes mysql@epoch, atomically
// with respect to every deciding script (one in flight finishes first;
// every later one refuses). It returns the fence after the call, whatever
// it is: mysql@epoch when this or an earlier call of the same handoff set
// it, or a fence of a higher epoch that overtook it. Repeating it changes
// nothing.
func (s *Store) Yield(ctx context.Context, shop, epoch int64) (reservation.Fence, error) {
	return s.raiseFence(ctx, "yield", shop, reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: epoch})
}

// Force is the forced takeover of the redis_only kill switch, when MySQL
// cannot be drained: if the shop's fence has a lower epoch, it becomes
// redis@epoch without waiting for the change feed. What the relay had not
// delivered is at risk; the caller counts and logs it. It returns the
// fence after the call, as Yield does.
func (s *Store) Force(ctx context.Context, shop, epoch int64) (reservation.Fence, error) {
	return s.raiseFence(ctx, "force", shop, reservation.Fence{Decider: reservation.AuthorityRedis, Epoch: epoch})
}

// NoteForced records that the handoff is about to take shop for Redis by
// force without MySQL's yield (Force after MySQL did not answer): MySQL's
// fence still names MySQL, and MySQL would decide the shop again with its
// stale state as soon as it answers. Until FencedOff clears it, the shop
// is listed by Forced. It is recorded before the fence moves, so a crash
// between the two leaves a note too many (cleared harmlessly), never one
// too few.
func (s *Store) NoteForced(ctx context.Context, shop int64) error {
	if err := validShop("shop", shop); err != nil {
		return err
	}
	if err := s.client.SAdd(ctx, s.forcedKey(), shop).Err(); err != nil {
		return fmt.Errorf("redisstore: note shop %d taken by force: %w", shop, err)
	}
	return nil
}

// Forced lists the shops NoteForced recorded and FencedOff has not
// cleared: shops whose MySQL fence may still name MySQL although Redis
// took them.
func (s *Store) Forced(ctx context.Context) ([]int64, error) {
	vs, err := s.client.SMembers(ctx, s.forcedKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: shops taken by force: %w", err)
	}
	out := make([]int64, 0, len(vs))
	for _, v := range vs {
		shop, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redisstore: shops taken by force: %q is not a shop id", v)
		}
		out = append(out, shop)
	}
	slices.Sort(out)
	return out, nil
}

// FencedOff clears shop's note: MySQL's fence no longer names MySQL at an
// epoch below Redis's.
func (s *Store) FencedOff(ctx context.Context, shop int64) error {
	if err := s.client.SRem(ctx, s.forcedKey(), shop).Err(); err != nil {
		return fmt.Errorf("redisstore: clear shop %d taken by force: %w", shop, err)
	}
	return nil
}

func (s *Store) raiseFence(ctx context.Context, caller string, shop int64, to reservation.Fence) (reservation.Fence, error) {
	if err := validShop("shop", shop); err != nil {
		return reservation.Fence{}, err
	}
	if to.Epoch < 1 {
		return reservation.Fence{}, &reservation.ValidationError{Field: "epoch", Reason: fmt.Sprintf("must be positive (epoch 0 is the fence of a shop never handed off), got %d", to.Epoch)}
	}
	_, after, err := s.fenceScript(ctx, caller, shop, to)
	return after, err
}

// fenceScript runs the fence script: it reports whether the fence was
// raised, and the fence after.
func (s *Store) fenceScript(ctx context.Context, caller string, shop int64, to reservation.Fence) (bool, reservation.Fence, error) {
	reply, err := s.run(ctx, caller, scriptFence, []string{s.shopKeys(shop).fence()}, to.String(), to.Epoch)
	if err != nil {
		return false, reservation.Fence{}, err
	}
	str, _ := at(reply, 1).(string)
	f, err := reservation.ParseFence(str)
	if err != nil {
		return false, reservation.Fence{}, fmt.Errorf("redisstore: %s shop %d: %w", caller, shop, err)
	}
	return reply[0] == "raised", f, nil
}

// snapshotPage is how many holds or tombstones one step of Snapshot reads.
const snapshotPage = 500

// Snapshot reads a shop's fence, holds and live tombstones, sorted by
// token. It reads in pages, several commands in all, so a large shop never
// blocks Redis for long; the pages agree with each other only when nothing
// in the shop changes meanwhile, which is why a handoff calls it after
// Yield. Hold expiries are the hold's own (Redis's clock for the holds it
// decided).
func (s *Store) Snapshot(ctx context.Context, shop int64) (reservation.Snapshot, error) {
	if err := validShop("shop", shop); err != nil {
		return reservation.Snapshot{}, err
	}
	f, err := s.Fence(ctx, shop)
	if err != nil {
		return reservation.Snapshot{}, err
	}
	snap := reservation.Snapshot{Shop: shop, Fence: f}
	k := s.shopKeys(shop)
	err = s.pages(ctx, k.expiry(), func(pipe redis.Pipeliner, token string) func() error {
		cmd := pipe.HGetAll(ctx, k.hold(token))
		return func() error {
			m, err := cmd.Result()
			if err != nil || len(m) == 0 {
				return err // an index entry without a hold holds nothing
			}
			h, err := parseHoldMap(m)
			if err != nil {
				return fmt.Errorf("token %q: %w", token, err)
			}
			snap.Holds = append(snap.Holds, h.hold(shop, token))
			return nil
		}
	})
	if err != nil {
		return reservation.Snapshot{}, fmt.Errorf("redisstore: snapshot of shop %d: holds: %w", shop, err)
	}
	err = s.pages(ctx, k.tombs(), func(pipe redis.Pipeliner, token string) func() error {
		cmd := pipe.Get(ctx, k.tomb(token))
		return func() error {
			v, err := cmd.Result()
			if errors.Is(err, redis.Nil) {
				return nil // forgotten, not yet trimmed from the index
			}
			if err != nil {
				return err
			}
			t, err := decodeTomb(token, v)
			if err != nil {
				return err
			}
			snap.Tombstones = append(snap.Tombstones, t)
			return nil
		}
	})
	if err != nil {
		return reservation.Snapshot{}, fmt.Errorf("redisstore: snapshot of shop %d: tombstones: %w", shop, err)
	}
	slices.SortFunc(snap.Holds, func(a, b reservation.Hold) int { return cmp.Compare(a.Token, b.Token) })
	slices.SortFunc(snap.Tombstones, func(a, b reservation.Tombstone) int { return cmp.Compare(a.Token, b.Token) })
	return snap, nil
}

// pages walks a sorted set by rank, snapshotPage members at a time, and
// for each page pipelines one read per member (queue adds it and returns
// what reads its result).
func (s *Store) pages(ctx context.Context, zset string, queue func(pipe redis.Pipeliner, member string) func() error) error {
	for start := int64(0); ; start += snapshotPage {
		members, err := s.client.ZRange(ctx, zset, start, start+snapshotPage-1).Result()
		if err != nil {
			return err
		}
		if len(members) == 0 {
			return nil
		}
		reads := make([]func() error, len(members))
		_, err = s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, m := range members {
				reads[i] = queue(pipe, m)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for _, read := range reads {
			if err := read(); err != nil {
				return err
			}
		}
		if len(members) < snapshotPage {
			return nil
		}
	}
}

// applyBatch bounds the changes one pipeline carries.
const applyBatch = 256

// Apply applies MySQL's change feed, in order, and returns how many
// changes, from the first, were applied. It stops at the first failure
// (an invalid change is a *reservation.ValidationError naming it); the
// caller delivers the rest again later. Every change is idempotent and a
// state change applies the reservation's current state, so delivering a
// change twice, or a token's changes in another order, ends in the same
// state. Changes run pipelined, except that a fence change runs only after
// every change before it succeeded: a handoff to Redis must not let Redis
// decide before it holds everything MySQL decided. When a pipelined change
// fails, some after it may have been applied already: harmless, since they
// are idempotent.
//
//   - ChangeState: see scriptApplyState. In short: held creates the hold
//     (MySQL's allocations and expiry, authority mysql, its units taken
//     out without a stock check) unless the token has a hold or a
//     tombstone; a terminal state removes the hold (giving its units back),
//     takes a claim's deduction out, and leaves the tombstone; a claim
//     turns another tombstone into a claimed one. State "" applies
//     nothing.
//   - ChangeAdjust: the quantity moves by Delta once per change ID (the
//     marker Adjust uses too).
//   - ChangeFence: the fence is set if its epoch is higher.
//
// Each change is counted in reservoir_redis_mirror_applies_total by kind
// and result. Apply evaluates no cart (see ApplyEvaluating).
func (s *Store) Apply(ctx context.Context, changes []reservation.Change) (applied int, err error) {
	return s.ApplyEvaluating(ctx, changes, nil)
}

// ApplyEvaluating is Apply that also asks Redis about the cart a change
// carries, read-only, in the same pipeline and just before the change is
// applied, and hands the answer to eval once the change is applied, also
// when an earlier change of the pipeline failed (the applied change comes
// again with it, and Redis would then have no answer of its own). eval is
// not called for a change Redis did not apply (it comes again), nor when
// Redis already had the token (a hold or a tombstone: the change was
// delivered before, and Redis's answer would be a replay, not a decision
// of its own), nor when the evaluation script was missing from the
// server's cache (it is loaded for the next ones). With eval nil no cart
// is evaluated.
func (s *Store) ApplyEvaluating(ctx context.Context, changes []reservation.Change, eval reservation.Evaluated) (applied int, err error) {
	ctx, span := startSpan(ctx, "apply")
	defer func() { endSpan(span, err) }()
	for applied < len(changes) {
		if changes[applied].Kind == reservation.ChangeFence {
			if err := s.applyFence(ctx, applied, changes[applied]); err != nil {
				return applied, err
			}
			applied++
			continue
		}
		end := applied
		for end < len(changes) && end-applied < applyBatch && changes[end].Kind != reservation.ChangeFence {
			end++
		}
		n, err := s.applyPipelined(ctx, applied, changes[applied:end], eval)
		applied += n
		if err != nil {
			return applied, err
		}
	}
	return applied, nil
}

func (s *Store) applyFence(ctx context.Context, i int, c reservation.Change) error {
	if err := validChange(i, c); err != nil {
		return err
	}
	raised, _, err := s.fenceScript(ctx, "apply_fence", c.Shop, c.Fence)
	if err != nil {
		s.metrics.followApplies.WithLabelValues(string(c.Kind), "error").Inc()
		return fmt.Errorf("redisstore: apply changes[%d] (id %d, fence %s for shop %d): %w", i, c.ID, c.Fence, c.Shop, err)
	}
	result := "unchanged"
	if raised {
		result = "raised"
	}
	s.metrics.followApplies.WithLabelValues(string(c.Kind), result).Inc()
	return nil
}

// applyPipelined applies a run of state and adjust changes (offset is the
// first one's index in Apply's slice, for errors) and returns how many,
// from the first, were applied.
func (s *Store) applyPipelined(ctx context.Context, offset int, changes []reservation.Change, eval reservation.Evaluated) (int, error) {
	var invalid error
	for i, c := range changes {
		if err := validChange(offset+i, c); err != nil {
			changes, invalid = changes[:i], err
			break
		}
	}
	if len(changes) > 0 {
		// Register the shops first, as Adjust does, so the reaper finds
		// the holds followed here once Redis decides again.
		shops := make([]any, 0, len(changes))
		for _, c := range changes {
			shops = append(shops, c.Shop)
		}
		if err := s.client.SAdd(ctx, s.shopsKey(), shops...).Err(); err != nil {
			return 0, fmt.Errorf("redisstore: apply: register shops: %w", err)
		}
	}
	done := 0
	reloaded := false
	for done < len(changes) {
		n, noScript, err := s.applyOnce(ctx, offset+done, changes[done:], eval)
		done += n
		if err == nil {
			continue
		}
		if noScript && !reloaded {
			// The server lost its script cache (a restart, a failover):
			// load the scripts and go on from the change that failed.
			reloaded = true
			if err := s.loadApplyScripts(ctx); err != nil {
				return done, err
			}
			continue
		}
		return done, err
	}
	return done, invalid
}

// applyOnce sends changes in one pipeline and returns how many, from the
// first, were applied, and whether the first failure was a script missing
// from the server's cache.
func (s *Store) applyOnce(ctx context.Context, offset int, changes []reservation.Change, eval reservation.Evaluated) (int, bool, error) {
	cmds := make([]*redis.Cmd, len(changes))
	var evals []evaluation
	if eval != nil {
		evals = make([]evaluation, len(changes))
	}
	start := time.Now()
	_, _ = s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, c := range changes {
			k := s.shopKeys(c.Shop)
			if evals != nil && c.Kind == reservation.ChangeState && c.State != "" && len(c.Cart) > 0 {
				evals[i] = s.evaluate(ctx, pipe, c)
			}
			switch {
			case c.Kind == reservation.ChangeAdjust:
				cmds[i] = scriptAdjust.EvalSha(ctx, pipe, []string{k.qty(c.Item), k.op(c.ID)}, c.Location, c.Delta, changeTTL.Milliseconds())
			case c.State != "":
				cmds[i] = scriptApplyState.EvalSha(ctx, pipe, []string{k.hold(c.Token), k.tomb(c.Token), k.fence()},
					k.base, c.Token, string(c.State), reservation.EncodeAllocations(reservation.SortedAllocations(c.Allocations)),
					timeMS(c.ExpiresAt), reservation.EncodeShort(c.Short), s.cfg.TombstoneTTL.Milliseconds())
			}
		}
		return nil
	})
	// Evaluations are reported once their change is applied, those of
	// changes applied after the first failure too: the failed change and
	// the ones after it come again, and Redis, which already has the
	// tokens applied, would then have no answer of its own for them.
	defer s.reloadEvaluate(ctx, evals)
	for i, c := range changes {
		if cmds[i] == nil {
			s.metrics.followApplies.WithLabelValues(string(c.Kind), "nothing").Inc()
			s.evaluated(evals, offset, i, start, eval)
			continue
		}
		result, err := s.applied(c, cmds[i])
		caller := "apply_state"
		if c.Kind == reservation.ChangeAdjust {
			caller = "apply_adjust"
		}
		s.metrics.observe(caller, start, err)
		if err != nil {
			for j := i + 1; j < len(changes); j++ {
				if cmds[j] == nil || cmds[j].Err() == nil {
					s.evaluated(evals, offset, j, start, eval)
				}
			}
			if isNoScript(err) {
				return i, true, err
			}
			s.metrics.followApplies.WithLabelValues(string(c.Kind), "error").Inc()
			return i, false, fmt.Errorf("redisstore: apply changes[%d] (id %d, %s of shop %d): %w", offset+i, c.ID, c.Kind, c.Shop, err)
		}
		s.metrics.followApplies.WithLabelValues(string(c.Kind), result).Inc()
		if result == "converted" || result == "tombstoned" {
			s.metrics.tombstonesWritten.WithLabelValues(string(c.State)).Inc()
		}
		s.evaluated(evals, offset, i, start, eval)
	}
	return len(changes), false, nil
}

// reloadEvaluate loads the evaluation script when an evaluation of evals
// found it missing from the server's cache (a restart, a failover): those
// carts go unobserved (their changes were applied all the same; asking
// again now would see them applied), the next ones are evaluated.
func (s *Store) reloadEvaluate(ctx context.Context, evals []evaluation) {
	for _, e := range evals {
		if e.cmd != nil && isNoScript(e.cmd.Err()) {
			_ = scriptReserve.Load(ctx, s.client).Err()
			return
		}
	}
}

// evaluation is a cart's evaluation queued in an apply pipeline: the
// script call, or why none was made.
type evaluation struct {
	p   *reservation.ReserveParams
	cmd *redis.Cmd
	err error
}

// evaluate queues on pipe the read-only reserve of c's cart, as Redis would
// have decided it (scriptReserve in shadow mode, as a shadow Reserve runs
// it). The hold's TTL only sets the expiry of an answer nobody keeps.
func (s *Store) evaluate(ctx context.Context, pipe redis.Pipeliner, c reservation.Change) evaluation {
	p := &reservation.ReserveParams{Shop: c.Shop, Token: c.Token, Lines: c.Cart, TTL: s.cfg.Limits.MinTTL, As: reservation.AsShadow}
	if err := s.cfg.Limits.ValidateCart(c.Cart); err != nil {
		return evaluation{p: p, err: fmt.Errorf("redisstore: evaluate the cart of token %q: %w", c.Token, err)}
	}
	keys, args := s.reserveArgs(p, reservation.AuthorityRedis)
	return evaluation{p: p, cmd: scriptReserve.EvalShaRO(ctx, pipe, keys, args...)}
}

// evaluated hands the evaluation of changes[i], if any, to eval: the
// change is applied.
func (s *Store) evaluated(evals []evaluation, offset, i int, start time.Time, eval reservation.Evaluated) {
	if evals == nil || evals[i].p == nil {
		return
	}
	e := evals[i]
	if e.err != nil {
		eval(offset+i, reservation.ReserveResult{}, e.err)
		return
	}
	v, err := e.cmd.Result()
	s.metrics.observe("apply_evaluate", start, err)
	if isNoScript(err) {
		return // see reloadEvaluate
	}
	if err != nil {
		eval(offset+i, reservation.ReserveResult{}, fmt.Errorf("redisstore: evaluate the cart of token %q: %w", e.p.Token, err))
		return
	}
	reply, ok := v.([]any)
	if !ok || len(reply) == 0 {
		eval(offset+i, reservation.ReserveResult{}, fmt.Errorf("redisstore: evaluate the cart of token %q: unexpected reply %v", e.p.Token, v))
		return
	}
	if reply[0] == "tomb" || reply[0] == "existing" {
		return // delivered before: Redis already follows the token
	}
	res, err := s.reserveAnswer(e.p, reservation.AuthorityRedis, reply)
	eval(offset+i, res, err)
}

// applied reads one change's script reply into its result label.
func (s *Store) applied(c reservation.Change, cmd *redis.Cmd) (string, error) {
	v, err := cmd.Result()
	if err != nil {
		return "", err
	}
	reply, ok := v.([]any)
	if !ok || len(reply) == 0 {
		return "", fmt.Errorf("unexpected reply %v", v)
	}
	if c.Kind == reservation.ChangeAdjust {
		if n, err := toInt(reply[0]); err != nil {
			return "", fmt.Errorf("unexpected reply %v", v)
		} else if n == 0 {
			return "duplicate", nil
		}
		return "applied", nil
	}
	switch what, _ := reply[0].(string); what {
	case "unchanged", "kept", "replaced", "created", "converted", "tombstoned":
		return what, nil
	}
	return "", fmt.Errorf("unexpected reply %v", v)
}

func (s *Store) loadApplyScripts(ctx context.Context) error {
	for _, sc := range []*redis.Script{scriptAdjust, scriptApplyState} {
		if err := sc.Load(ctx, s.client).Err(); err != nil {
			return fmt.Errorf("redisstore: apply: load scripts: %w", err)
		}
	}
	return nil
}

func isNoScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

// validChange checks a change of the feed before anything of it is
// applied; errors name the change by its index.
func validChange(i int, c reservation.Change) error {
	field := fmt.Sprintf("changes[%d]", i)
	bad := func(f, format string, args ...any) error {
		return &reservation.ValidationError{Field: field + "." + f, Reason: fmt.Sprintf(format, args...)}
	}
	if err := validShop(field+".shop", c.Shop); err != nil {
		return err
	}
	switch c.Kind {
	case reservation.ChangeState:
		if c.State == "" {
			return nil
		}
		if err := reservation.DefaultLimits.ValidateGet(&reservation.GetParams{Shop: c.Shop, Token: c.Token}); err != nil {
			return bad("token", "%v", err)
		}
		if !c.State.Valid() {
			return bad("state", "unknown state %q", c.State)
		}
		if c.State == reservation.StateHeld && len(c.Allocations) == 0 {
			return bad("allocations", "a held reservation holds at least one allocation")
		}
		if c.State == reservation.StateHeld && c.ExpiresAt.IsZero() {
			return bad("expires_at", "a held reservation has an expiry")
		}
		if err := validAllocations(field+".allocations", c.Allocations); err != nil {
			return err
		}
	case reservation.ChangeAdjust:
		switch {
		case c.ID <= 0:
			return bad("id", "an adjust is applied once per change id, which must be positive, got %d", c.ID)
		case c.Item <= 0:
			return bad("item", "must be a positive id, got %d", c.Item)
		case c.Location <= 0:
			return bad("location", "must be a positive id, got %d", c.Location)
		}
	case reservation.ChangeFence:
		if !c.Fence.Decider.Valid() || c.Fence.Epoch < 0 {
			return bad("fence", "not a fence: %q", c.Fence.String())
		}
	default:
		return bad("kind", "unknown kind %q", c.Kind)
	}
	return nil
}

// validAllocations checks allocations the store writes as they are given
// (Apply's and Rewrite's): positive ids and quantities, no
// item x location twice.
func validAllocations(field string, as []reservation.Allocation) error {
	seen := make(map[cell]bool, len(as))
	for i, a := range as {
		if a.Item <= 0 || a.Location <= 0 || a.Quantity <= 0 {
			return &reservation.ValidationError{Field: fmt.Sprintf("%s[%d]", field, i), Reason: fmt.Sprintf("ids and quantity must be positive, got %+v", a)}
		}
		if seen[cell{a.Item, a.Location}] {
			return &reservation.ValidationError{Field: fmt.Sprintf("%s[%d]", field, i), Reason: fmt.Sprintf("item %d at location %d is listed twice", a.Item, a.Location)}
		}
		seen[cell{a.Item, a.Location}] = true
	}
	return nil
}

func validShop(field string, shop int64) error {
	if shop <= 0 {
		return &reservation.ValidationError{Field: field, Reason: fmt.Sprintf("must be a positive id, got %d", shop)}
	}
	return nil
}

// Rewrite is the copy step of "copy and catch-up" (docs/ownership.md,
// section 4): it makes the shop exactly snap (its fence, holds and
// tombstones; every other hold and tombstone of the shop goes) with every
// quantity of an item the ledger or a hold names set to the ledger's
// available minus what the holds hold there, in one script, so no write of
// the shop interleaves. ledger is the shop's ledger rows, read while
// MySQL decided nothing for the shop, like snap. covered are the ids of
// the feed's adjust changes that the ledger rows already include: their
// markers are set too, so a relay that read one of them before the copy
// and delivers it after does not move the quantity a second time.
// Tombstones live Config.TombstoneTTL from now.
func (s *Store) Rewrite(ctx context.Context, snap reservation.Snapshot, ledger []reservation.StockLevel, covered []int64) error {
	if err := validSnapshot(snap, ledger); err != nil {
		return err
	}
	for i, id := range covered {
		if id <= 0 {
			return &reservation.ValidationError{Field: fmt.Sprintf("covered[%d]", i), Reason: fmt.Sprintf("a change id is positive, got %d", id)}
		}
	}
	if err := s.client.SAdd(ctx, s.shopsKey(), snap.Shop).Err(); err != nil {
		return fmt.Errorf("redisstore: rewrite: register shop %d: %w", snap.Shop, err)
	}
	k := s.shopKeys(snap.Shop)
	args := []any{k.base, s.cfg.TombstoneTTL.Milliseconds(), snap.Fence.String(), changeTTL.Milliseconds(), len(ledger)}
	for _, l := range ledger {
		args = append(args, l.Item, l.Location, l.Available)
	}
	args = append(args, len(snap.Holds))
	for _, h := range snap.Holds {
		args = append(args, h.Token, h.ExpiresAt.UnixMilli(), string(h.Authority), reservation.EncodeAllocations(reservation.SortedAllocations(h.Allocations)))
	}
	args = append(args, len(snap.Tombstones))
	for _, t := range snap.Tombstones {
		args = append(args, t.Token, string(t.State), timeMS(t.ExpiresAt), reservation.EncodeAllocations(reservation.SortedAllocations(t.Allocations)), reservation.EncodeShort(t.Short))
	}
	args = append(args, len(covered))
	for _, id := range covered {
		args = append(args, id)
	}
	reply, err := s.run(ctx, "rewrite", scriptRewrite, []string{k.expiry(), k.tombs(), k.fence()}, args...)
	if err != nil {
		return fmt.Errorf("redisstore: rewrite shop %d: %w", snap.Shop, err)
	}
	if what, _ := at(reply, 0).(string); what == "newer" {
		cur, _ := at(reply, 1).(string)
		f, err := reservation.ParseFence(cur)
		if err != nil {
			return fmt.Errorf("redisstore: rewrite shop %d: %w", snap.Shop, err)
		}
		return &reservation.NewerFenceError{Shop: snap.Shop, Fence: f, Snapshot: snap.Fence}
	}
	return nil
}

func validSnapshot(snap reservation.Snapshot, ledger []reservation.StockLevel) error {
	if err := validShop("snapshot.shop", snap.Shop); err != nil {
		return err
	}
	if !snap.Fence.Decider.Valid() || snap.Fence.Epoch < 0 {
		return &reservation.ValidationError{Field: "snapshot.fence", Reason: fmt.Sprintf("not a fence: %q", snap.Fence.String())}
	}
	tokens := map[string]string{}
	token := func(field, t string) error {
		if err := reservation.DefaultLimits.ValidateGet(&reservation.GetParams{Shop: snap.Shop, Token: t}); err != nil {
			return &reservation.ValidationError{Field: field + ".token", Reason: err.Error()}
		}
		if prev, dup := tokens[t]; dup {
			return &reservation.ValidationError{Field: field + ".token", Reason: fmt.Sprintf("token %q is also %s", t, prev)}
		}
		tokens[t] = field
		return nil
	}
	for i, h := range snap.Holds {
		field := fmt.Sprintf("snapshot.holds[%d]", i)
		if err := token(field, h.Token); err != nil {
			return err
		}
		if !h.Authority.Valid() {
			return &reservation.ValidationError{Field: field + ".authority", Reason: fmt.Sprintf("must be %q or %q, got %q", reservation.AuthorityRedis, reservation.AuthorityMySQL, h.Authority)}
		}
		if len(h.Allocations) == 0 {
			return &reservation.ValidationError{Field: field + ".allocations", Reason: "a hold holds at least one allocation"}
		}
		if err := validAllocations(field+".allocations", h.Allocations); err != nil {
			return err
		}
	}
	for i, t := range snap.Tombstones {
		field := fmt.Sprintf("snapshot.tombstones[%d]", i)
		if err := token(field, t.Token); err != nil {
			return err
		}
		if !t.State.Terminal() {
			return &reservation.ValidationError{Field: field + ".state", Reason: fmt.Sprintf("a tombstone's state is terminal, got %q", t.State)}
		}
		if err := validAllocations(field+".allocations", t.Allocations); err != nil {
			return err
		}
	}
	for i, l := range ledger {
		field := fmt.Sprintf("ledger[%d]", i)
		switch {
		case l.Shop != snap.Shop:
			return &reservation.ValidationError{Field: field + ".shop", Reason: fmt.Sprintf("a row of shop %d in a rewrite of shop %d", l.Shop, snap.Shop)}
		case l.Item <= 0 || l.Location <= 0:
			return &reservation.ValidationError{Field: field, Reason: fmt.Sprintf("ids must be positive, got item %d location %d", l.Item, l.Location)}
		}
	}
	return nil
}
