package mirror

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// A handoff to MySQL copies ahead (docs/ownership.md, section 3), the way
// gh-ost and Vitess cut over: while Redis keeps deciding the shop, its
// holds and tombstones are copied into MySQL; the tokens that changed
// meanwhile (Redis logs them while a copy is under way) are copied again,
// round after round, until few are left; then Redis yields and MySQL takes
// the shop over with only the last of them. The time no store decides the
// shop is the cut-over's, whatever the shop's size.
//
// A copy runs in the background, one per shop in this process (copyRuns)
// and one per shop across every replica (MySQL's copy lease). A caller
// that needs a large shop decided follows Redis, which decides until the
// cut-over; a small shop's copy is as short as the cut-over, and its
// caller waits for it (Config.CopyInline).

// copyPart is how many tokens one part of a copy writes in one MySQL
// transaction.
const copyPart = 200

// changedPage is how many changed tokens one read of Redis's log returns.
const changedPage = 1000

// busyFor is how long a copy this process could not run (another replica
// holds the shop's copy) answers the callers that join it, before the next
// caller tries again.
const busyFor = 50 * time.Millisecond

// copyRun is one handoff of a shop to MySQL at an epoch, in the
// background: the copy ahead and the cut-over.
type copyRun struct {
	shop, epoch int64
	// follow is Redis's fence when the run started, Redis deciding: the
	// decider callers follow until the cut-over. known is closed once it
	// is set, and only for a shop large enough to copy in the background
	// (Config.CopyInline).
	follow reservation.Fence
	known  chan struct{}
	// cutover is closed when Redis is about to yield: from then on the
	// shop is decided again only when the run ends.
	cutover chan struct{}
	done    chan struct{}
	// Set before done is closed.
	fence  reservation.Fence
	result string
	err    error
	ended  time.Time
}

// copyRuns are the copies of this process, by shop.
type copyRuns struct {
	mu sync.Mutex
	m  map[int64]*copyRun
}

// toMySQL hands shop to MySQL at epoch, copying ahead. It starts the copy
// (or joins the one under way for the shop) and waits for its end, unless
// follow is set and the shop is large (Config.CopyInline): then, as soon
// as the copy has read that Redis decides, it returns Redis's fence (the
// caller follows it) and the copy goes on. Once the cut-over has begun it
// waits for its end (Redis no longer decides).
func (m *Mirror) toMySQL(ctx context.Context, shop, epoch int64, follow bool) (reservation.Fence, string, error) {
	r := m.startCopy(shop, epoch, follow)
	known := r.known
	if !follow {
		known = nil // never ready: wait for the end
	}
	select {
	case <-r.done:
		return r.fence, r.result, r.err
	case <-ctx.Done():
		return reservation.Fence{}, "", ctx.Err()
	case <-known:
	}
	select {
	case <-r.cutover:
	default:
		return m.following(r), "copying", nil // Redis decides until the cut-over
	}
	select {
	case <-r.done:
		return r.fence, r.result, r.err
	case <-ctx.Done():
		return reservation.Fence{}, "", ctx.Err()
	}
}

// Following returns Redis's fence while a handoff of shop to MySQL copies
// ahead in this process (its copy has read that Redis decides, and its
// cut-over has not begun), or was found copying on another replica less
// than busyFor ago: the store a call on the shop asks meanwhile
// (dualwrite.Mirror). A hint: Redis refuses once it has yielded.
func (m *Mirror) Following(shop int64) (reservation.Fence, bool) {
	m.copies.mu.Lock()
	defer m.copies.mu.Unlock()
	r, ok := m.copies.m[shop]
	if !ok {
		return reservation.Fence{}, false
	}
	select {
	case <-r.done:
		if r.result == "busy" && time.Since(r.ended) < busyFor {
			return r.fence, true
		}
		return reservation.Fence{}, false
	default:
	}
	select {
	case <-r.known:
	default:
		return reservation.Fence{}, false // a small shop's copy: its caller waits for it
	}
	select {
	case <-r.cutover:
		return reservation.Fence{}, false
	default:
		return r.follow, true
	}
}

// following is the fence a caller follows while r copies: Redis's, as the
// run read it (once r.known is closed).
func (m *Mirror) following(r *copyRun) reservation.Fence {
	m.copies.mu.Lock()
	defer m.copies.mu.Unlock()
	return r.follow
}

// startCopy returns the shop's copy run, starting one at epoch unless one
// is under way (or, for a caller that follows, ended with
// reservation.ErrCopyBusy less than busyFor ago: such a caller follows
// Redis anyway).
func (m *Mirror) startCopy(shop, epoch int64, follow bool) *copyRun {
	m.copies.mu.Lock()
	defer m.copies.mu.Unlock()
	if r, ok := m.copies.m[shop]; ok {
		select {
		case <-r.done:
			if follow && r.result == "busy" && time.Since(r.ended) < busyFor {
				return r
			}
		default:
			// Under way, for this epoch or another: an older epoch's copy
			// yields Redis at its own epoch, and the caller compares
			// epochs itself. Two copiers of one shop would only wait for
			// each other.
			return r
		}
	}
	if m.copies.m == nil {
		m.copies.m = map[int64]*copyRun{}
	}
	r := &copyRun{shop: shop, epoch: epoch, known: make(chan struct{}), cutover: make(chan struct{}), done: make(chan struct{})}
	m.copies.m[shop] = r
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		start := time.Now()
		f, result, err := m.copyAhead(m.bgCtx, r)
		if err != nil {
			result = "failed"
			m.log.Warn("mirror: a handoff to MySQL did not finish; the next call or sweep tries again", "shop", shop, "epoch", epoch, "err", err)
		}
		m.metrics.handoffs.WithLabelValues(string(reservation.AuthorityMySQL), result).Inc()
		m.metrics.handoffSeconds.WithLabelValues(string(reservation.AuthorityMySQL)).Observe(time.Since(start).Seconds())
		m.copies.mu.Lock()
		r.fence, r.result, r.err, r.ended = f, result, err, time.Now()
		if result != "busy" {
			delete(m.copies.m, shop)
		}
		m.copies.mu.Unlock()
		select {
		case <-r.cutover:
		default:
			close(r.cutover)
		}
		close(r.done)
	}()
	return r
}

// copyAhead is one run: see the file's comment.
func (m *Mirror) copyAhead(ctx context.Context, r *copyRun) (reservation.Fence, string, error) {
	shop, epoch := r.shop, r.epoch
	rf, err := m.cfg.Redis.Fence(ctx, shop)
	if err != nil {
		return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to mysql: %w", shop, err)
	}
	if rf.Decider == reservation.AuthorityMySQL {
		// Redis yielded already: a cut-over is under way (another
		// replica's copy) or its copier died before MySQL took over.
		return m.finishCutover(ctx, shop, rf.Epoch, max(rf.Epoch, epoch))
	}
	if rf.Epoch >= epoch {
		return rf, "overtaken", nil // a newer handoff gave the shop to Redis
	}
	cp, err := m.cfg.Redis.StartCopy(ctx, shop)
	var nd *reservation.NotDeciderError
	if errors.As(err, &nd) {
		// Yielded between the two reads.
		return m.finishCutover(ctx, shop, nd.Fence.Epoch, max(nd.Fence.Epoch, epoch))
	}
	if err != nil {
		return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to mysql: %w", shop, err)
	}
	large := cp.Size >= m.cfg.CopyInline
	if large {
		// Redis decides (StartCopy checked it) and the copy is long:
		// callers follow Redis until the cut-over.
		m.copies.mu.Lock()
		r.follow = rf
		m.copies.mu.Unlock()
		close(r.known)
	}
	copier, mf, err := m.cfg.MySQL.BeginCopy(ctx, shop, cp.ID, rf)
	if errors.Is(err, reservation.ErrCopyBusy) {
		// Another replica copies it: Redis decides meanwhile. A small
		// shop's copy is short: wait for its cut-over, so that which store
		// answers after a flip does not depend on which replica copies.
		if cp.Size < m.cfg.CopyInline {
			if mf, ok, err := m.awaitMySQL(ctx, shop, rf.Epoch+1, time.Now().Add(m.cfg.CutoverWait)); err != nil || ok {
				return mf, "joined", err
			}
		}
		return rf, "busy", nil
	}
	if err != nil {
		return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to mysql: %w", shop, err)
	}
	if copier == nil {
		// MySQL decides already, while Redis's fence still says Redis
		// does (its yield was lost: a flush, a failover): Redis yields
		// now, so that it never decides beside MySQL.
		_ = m.cfg.Redis.EndCopy(ctx, shop, cp.ID)
		if _, err := m.cfg.Redis.Yield(ctx, shop, mf.Epoch); err != nil {
			return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to mysql: raise Redis's fence to MySQL's %s: %w", shop, mf, err)
		}
		return mf, "joined", nil
	}
	defer copier.Close()
	// A small shop's caller waits for the whole handoff: it goes flat
	// out. A large one's copy runs beside the pod's calls: it rests
	// (Config.CopyRest) and refills the pools it emptied.
	rest := func(took time.Duration) error { return nil }
	if large {
		rest = func(took time.Duration) error { return m.rest(ctx, took) }
	}
	if err := m.copyAll(ctx, shop, copier, rest); err != nil {
		return reservation.Fence{}, "", err
	}
	pos := cp.Seq // the copy is complete up to the log's position at its start
	if m.afterCopy != nil {
		m.afterCopy(shop)
	}
	if large {
		// The copy took the units of the holds it wrote out of the
		// pools: refill them now, while Redis decides, rather than in the
		// first reserves MySQL decides after the cut-over (a refill sums
		// the item's holds: the larger the shop, the longer).
		if _, err := copier.Refill(ctx, rest); err != nil {
			return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to mysql: %w", shop, err)
		}
	}
	for range m.cfg.CatchUpRounds {
		n, next, err := m.catchUp(ctx, shop, copier, cp.ID, pos, rest)
		if err != nil {
			return reservation.Fence{}, "", err
		}
		pos = next
		if n <= m.cfg.CatchUpBelow {
			break
		}
	}
	return m.cutOver(ctx, r, copier, cp.ID, pos)
}

// copyAll copies every token MySQL holds (a shadow hold of a cart Redis
// never held is dropped) and every token Redis has. It streams: each page
// of MySQL's held tokens, then of Redis's walk, is copied as it comes
// (copyTokens), while Redis keeps deciding. Redis's walk misses no token
// left unchanged during it (Store.Tokens), and every token that changed
// after StartCopy is in the log the catch-up reads. No step handles the
// whole shop at once: the copy's work comes in small pieces between the
// pod's calls.
func (m *Mirror) copyAll(ctx context.Context, shop int64, copier reservation.Copier, rest func(time.Duration) error) error {
	seen := map[string]bool{}
	copyPage := func(page []string) error {
		fresh := make([]string, 0, len(page))
		for _, t := range page {
			if !seen[t] {
				seen[t] = true
				fresh = append(fresh, t)
			}
		}
		return m.copyTokens(ctx, shop, copier, fresh, rest)
	}
	if err := copier.Held(ctx, copyPage); err != nil {
		return fmt.Errorf("mirror: hand shop %d to mysql: %w", shop, err)
	}
	if err := m.cfg.Redis.Tokens(ctx, shop, copyPage); err != nil {
		return fmt.Errorf("mirror: hand shop %d to mysql: %w", shop, err)
	}
	return nil
}

// catchUp copies again every token logged after pos and returns how many
// there were and the position it read up to.
func (m *Mirror) catchUp(ctx context.Context, shop int64, copier reservation.Copier, id, pos int64, rest func(time.Duration) error) (int, int64, error) {
	tokens, next, err := m.changed(ctx, shop, id, pos)
	if err != nil {
		return 0, 0, err
	}
	if err := m.copyTokens(ctx, shop, copier, tokens, rest); err != nil {
		return 0, 0, err
	}
	return len(tokens), next, nil
}

// copyTokens copies tokens a part at a time: Redis's records of a part,
// read just before MySQL writes them, then a rest.
func (m *Mirror) copyTokens(ctx context.Context, shop int64, copier reservation.Copier, tokens []string, rest func(time.Duration) error) error {
	for chunk := range slices.Chunk(tokens, copyPart) {
		start := time.Now()
		part, err := m.cfg.Redis.Records(ctx, shop, chunk)
		if err != nil {
			return fmt.Errorf("mirror: hand shop %d to mysql: copy: %w", shop, err)
		}
		if err := copier.Copy(ctx, &part); err != nil {
			return fmt.Errorf("mirror: hand shop %d to mysql: copy: %w", shop, err)
		}
		m.metrics.copied.Add(float64(len(chunk)))
		if err := rest(time.Since(start)); err != nil {
			return err
		}
	}
	return nil
}

// rest paces a copy: after a part that took took, it waits took times
// Config.CopyRest, so that a copy leaves the servers' time to the pod's
// calls (gh-ost throttles its row copy for the same reason). The
// cut-over does not rest: it is the shop's undecided window.
func (m *Mirror) rest(ctx context.Context, took time.Duration) error {
	if d := time.Duration(float64(took) * m.cfg.CopyRest); d > 0 {
		sleep(ctx, d, nil)
	}
	return ctx.Err()
}

// changed reads every token of the copy's log after pos, deduplicated.
func (m *Mirror) changed(ctx context.Context, shop, id, pos int64) ([]string, int64, error) {
	if m.skipDelta {
		return nil, pos, nil
	}
	var out []string
	seen := map[string]bool{}
	for {
		page, next, err := m.cfg.Redis.Changed(ctx, shop, id, pos, changedPage)
		if err != nil {
			return nil, 0, fmt.Errorf("mirror: hand shop %d to mysql: %w", shop, err)
		}
		for _, t := range page {
			if !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
		pos = next
		if len(page) < changedPage {
			return out, pos, nil
		}
	}
}

// cutOver is the last step: Redis yields (from then on it decides nothing
// for the shop), and MySQL takes the shop over with the tokens logged
// since pos, in one transaction that sets its fence. If the copy was lost
// meanwhile, MySQL takes the whole shop over instead (as a handoff without
// a copy does). The time between the two is the shop's undecided window.
func (m *Mirror) cutOver(ctx context.Context, r *copyRun, copier reservation.Copier, id, pos int64) (reservation.Fence, string, error) {
	shop := r.shop
	close(r.cutover)
	start := time.Now()
	rf, err := m.cfg.Redis.Yield(ctx, shop, r.epoch)
	if err != nil {
		return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to mysql: %w", shop, err)
	}
	if rf.Decider != reservation.AuthorityMySQL {
		_ = m.cfg.Redis.EndCopy(ctx, shop, id)
		return rf, "overtaken", nil // a newer handoff gave the shop back to Redis
	}
	tokens, _, err := m.changed(ctx, shop, id, pos)
	var mf reservation.Fence
	if err == nil {
		var last reservation.Snapshot
		if last, err = m.cfg.Redis.Records(ctx, shop, tokens); err == nil {
			mf, err = copier.TakeOver(ctx, &last, rf.Epoch)
		}
	}
	if errors.Is(err, reservation.ErrCopyLost) {
		m.log.Warn("mirror: a copy was lost before its cut-over; taking the whole shop over", "shop", shop, "err", err)
		mf, err = m.takeOverWhole(ctx, shop, rf.Epoch)
	}
	if err != nil {
		return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to mysql: cut over: %w", shop, err)
	}
	m.metrics.cutoverSeconds.Observe(time.Since(start).Seconds())
	if mf.Decider == reservation.AuthorityMySQL {
		m.cutover(shop, reservation.AuthorityMySQL, start)
	}
	_ = m.cfg.Redis.EndCopy(ctx, shop, id)
	if mf.Decider != reservation.AuthorityMySQL {
		return mf, "overtaken", nil // a newer handoff gave it to Redis meanwhile
	}
	return mf, "done", nil
}

// awaitMySQL waits, until deadline, for MySQL to decide the shop at an
// epoch of at least min (another replica's cut-over, after Redis decided
// below min), or for its fence to reach min naming Redis (a newer handoff
// overtook it), and returns its fence and whether MySQL decides. A fence
// naming MySQL below min is not enough: it may be one Redis took the shop
// from by force, and MySQL's state is stale since.
func (m *Mirror) awaitMySQL(ctx context.Context, shop, min int64, deadline time.Time) (reservation.Fence, bool, error) {
	for {
		mf, err := m.cfg.MySQL.Fence(ctx, shop)
		if err != nil {
			return reservation.Fence{}, false, fmt.Errorf("mirror: hand shop %d to mysql: %w", shop, err)
		}
		if mf.Epoch >= min || time.Now().After(deadline) {
			return mf, mf.Epoch >= min && mf.Decider == reservation.AuthorityMySQL, nil
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return reservation.Fence{}, false, ctx.Err()
		case <-t.C:
		}
	}
}

// finishCutover is a handoff to MySQL that finds Redis yielded already, at
// yielded: it waits, up to Config.CutoverWait, for the copy under way to
// cut over (MySQL deciding at yielded or later), and otherwise takes the
// whole shop over at epoch itself (its copier may have died between
// Redis's yield and MySQL's takeover; the snapshot is exact, since Redis
// decides nothing after yielding).
func (m *Mirror) finishCutover(ctx context.Context, shop, yielded, epoch int64) (reservation.Fence, string, error) {
	mf, ok, err := m.awaitMySQL(ctx, shop, yielded, time.Now().Add(m.cfg.CutoverWait))
	switch {
	case err != nil:
		return reservation.Fence{}, "", err
	case ok:
		return mf, "joined", nil
	case mf.Epoch >= yielded:
		return mf, "overtaken", nil // a newer handoff gave the shop to Redis
	}
	m.log.Warn("mirror: Redis yielded a shop MySQL did not take over in time; taking the whole shop over", "shop", shop, "epoch", epoch, "wait", m.cfg.CutoverWait)
	mf, err = m.takeOverWhole(ctx, shop, epoch)
	if err != nil {
		return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to mysql: %w", shop, err)
	}
	if mf.Decider != reservation.AuthorityMySQL {
		return mf, "overtaken", nil
	}
	return mf, "whole", nil
}

// takeOverWhole is the handoff without a copy ahead: Redis yields (if it
// has not), and MySQL takes over a snapshot of the whole shop. Correct at
// any time, and slow in proportion to the shop: the copy ahead avoids it.
func (m *Mirror) takeOverWhole(ctx context.Context, shop, epoch int64) (reservation.Fence, error) {
	rf, err := m.cfg.Redis.Yield(ctx, shop, epoch)
	if err != nil {
		return reservation.Fence{}, err
	}
	if rf.Decider != reservation.AuthorityMySQL {
		return rf, nil // a newer handoff gave it back to Redis
	}
	snap, err := m.cfg.Redis.Snapshot(ctx, shop)
	if err != nil {
		return reservation.Fence{}, fmt.Errorf("read Redis's state: %w", err)
	}
	return m.cfg.MySQL.TakeOver(ctx, &snap, rf.Epoch)
}
