package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// replyDropper is a TCP proxy in front of Redis that, once armed with a
// pattern, forwards the next request containing it and then cuts both
// connections when the reply comes back, without passing the reply on: the
// server ran the command, the client never hears of it. A -NOSCRIPT reply
// (EVALSHA of a script the server has not cached) is passed on and the
// drop waits for the reply to the EVAL that follows, so the command whose
// reply is lost is always one that ran.
type replyDropper struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	pattern  []byte
	dropped  atomic.Int32
	wg       sync.WaitGroup
}

func newReplyDropper(t *testing.T, upstream string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{ln: ln, upstream: upstream}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *replyDropper) addr() string { return p.ln.Addr().String() }

// arm makes the proxy drop the reply to the next request containing
// pattern.
func (p *replyDropper) arm(pattern string) {
	p.mu.Lock()
	p.pattern = []byte(pattern)
	p.mu.Unlock()
}

// take reports whether buf is the armed request, disarming the proxy.
func (p *replyDropper) take(buf []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pattern != nil && bytes.Contains(buf, p.pattern) {
		p.pattern = nil
		return true
	}
	return false
}

func (p *replyDropper) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		var dropNext atomic.Bool
		cut := sync.OnceFunc(func() { c.Close(); u.Close() })
		p.wg.Add(2)
		go func() { // client -> server
			defer p.wg.Done()
			defer cut()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if p.take(buf[:n]) {
						dropNext.Store(true)
					}
					if _, werr := u.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // server -> client
			defer p.wg.Done()
			defer cut()
			buf := make([]byte, 64<<10)
			for {
				n, err := u.Read(buf)
				if n > 0 {
					if dropNext.Load() && !bytes.HasPrefix(buf[:n], []byte("-NOSCRIPT")) {
						p.dropped.Add(1)
						return // the reply dies with the connection
					}
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// lostReplyBundle is a store whose client goes through a replyDropper; the
// bundle's direct client reads the truth.
type lostReplyBundle struct {
	bundle
	proxy  *replyDropper
	via    *redisstore.Store
	viaReg *prometheus.Registry
}

func setupLostReply(t *testing.T, retries int) lostReplyBundle {
	t.Helper()
	b := setup(t, testredis.New)
	proxy := newReplyDropper(t, testredis.Addr(t))
	client := redis.NewClient(&redis.Options{Addr: proxy.addr(), MaxRetries: retries, MinRetryBackoff: time.Millisecond})
	t.Cleanup(func() { client.Close() })
	reg := prometheus.NewRegistry()
	// InlineClaimCleanup: the claim's cleanup on its path, whose reply
	// ClaimCleanup drops.
	cfg := redisstore.Config{Client: client, Ledger: b.ledger, Source: b.ledger, Prefix: b.r.Prefix, Limits: limits(), Registerer: reg, InlineClaimCleanup: true}
	var via *redisstore.Store
	var err error
	if retries < 0 {
		via, err = redisstore.New(cfg)
	} else {
		via, err = redisstore.NewUnchecked(cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return lostReplyBundle{bundle: b, proxy: proxy, via: via, viaReg: reg}
}

func isConnErr(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne)
}

// c. The connection is cut after the script ran, before its reply is read;
// the caller repeats the same call: the quantity moved once.
func TestLostReplyMovesQuantityOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reserve := func(s *redisstore.Store) (reservation.ReserveResult, error) {
		return s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "cart-1", Lines: []reservation.Line{line(1, 3, 1)}, TTL: time.Minute})
	}

	t.Run("Reserve", func(t *testing.T) {
		t.Parallel()
		b := setupLostReply(t, -1)
		b.stock(t, 1, 1, 10)
		b.proxy.arm(redisstore.ScriptHash("reserve"))
		if _, err := reserve(b.via); err == nil || !isConnErr(err) {
			t.Fatalf("reserve with its reply dropped: %v, want a connection error", err)
		}
		if got := b.qty(t, 1, 1); got != 7 || b.proxy.dropped.Load() != 1 {
			t.Fatalf("after the lost reply: quantity %d, drops %d; want 7 and 1 (the script ran, its reply was lost)", got, b.proxy.dropped.Load())
		}
		res, err := reserve(b.via)
		if err != nil || res.Status != reservation.StatusReserved || !res.Replayed {
			t.Fatalf("retry: %+v %v, want the first hold, replayed", res, err)
		}
		if got := b.qty(t, 1, 1); got != 7 {
			t.Errorf("quantity = %d after the retry, want 7: moved once", got)
		}
	})

	// The same sequence with the token check switched off: the retry
	// decrements again. This is what the test above catches if the reserve
	// script ever stops being idempotent.
	t.Run("ReserveWithoutTokenCheckDoubleApplies", func(t *testing.T) {
		t.Parallel()
		b := setupLostReply(t, -1)
		redisstore.SetSkipTokenCheck(b.via, true)
		b.stock(t, 1, 1, 10)
		b.proxy.arm(redisstore.ScriptHash("reserve"))
		if _, err := reserve(b.via); err == nil {
			t.Fatal("reserve with its reply dropped: no error")
		}
		if _, err := reserve(b.via); err != nil {
			t.Fatal(err)
		}
		if got := b.qty(t, 1, 1); got != 4 {
			t.Errorf("quantity = %d, want 4: without the token check the retry moves it a second time", got)
		}
	})

	t.Run("Release", func(t *testing.T) {
		t.Parallel()
		b := setupLostReply(t, -1)
		b.stock(t, 1, 1, 10)
		if _, err := reserve(b.via); err != nil {
			t.Fatal(err)
		}
		b.proxy.arm(redisstore.ScriptHash("release"))
		release := func() (reservation.ReleaseResult, error) {
			return b.via.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: "cart-1"})
		}
		if _, err := release(); err == nil || !isConnErr(err) {
			t.Fatalf("release with its reply dropped: %v, want a connection error", err)
		}
		res, err := release()
		if err != nil || res.Released {
			t.Fatalf("retry: %+v %v, want nothing left to release", res, err)
		}
		if got := b.qty(t, 1, 1); got != 10 {
			t.Errorf("quantity = %d, want 10: the 3 units came back once", got)
		}
	})

	// The claim's cleanup loses its reply after it ran: the ledger was
	// deducted, so the claim answers success all the same (counting the
	// window); the retry answers from the claimed tombstone, and neither
	// the ledger nor the quantity moves a second time.
	t.Run("ClaimCleanup", func(t *testing.T) {
		t.Parallel()
		b := setupLostReply(t, -1)
		b.stock(t, 1, 1, 10)
		if _, err := reserve(b.via); err != nil {
			t.Fatal(err)
		}
		b.proxy.arm(redisstore.ScriptHash("claim_cleanup"))
		claim := func() (reservation.ClaimResult, error) {
			return b.via.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "cart-1"})
		}
		res, err := claim()
		if err != nil || res.Outcome != reservation.OutcomeClaimed || res.Replayed || b.proxy.dropped.Load() != 1 {
			t.Fatalf("claim with its cleanup reply dropped: %+v %v (drops %d), want claimed: the ledger was deducted", res, err, b.proxy.dropped.Load())
		}
		if n := counterOf(t, b.viaReg, "reservoir_redis_legacy_claim_failures_total", "window", "after_deduct_before_cleanup"); n != 1 {
			t.Errorf("after_deduct_before_cleanup = %v, want 1", n)
		}
		res, err = claim()
		if err != nil || !res.Replayed {
			t.Fatalf("retry: %+v %v, want claimed, replayed", res, err)
		}
		b.settled(t, 7, "deducted once, hold removed once")
	})
}

// A client that resends (go-redis's default) delivers a script twice when
// a reply is lost. A bare HINCRBY then moves twice; the store's scripts,
// keyed by token or change id, move once. New refuses such a client (see
// TestNewRefusesBadConfig); this shows why, and what the scripts save when
// one slips through.
func TestResendingClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLostReply(t, 3)
	b.stock(t, 1, 1, 10)
	client := redis.NewClient(&redis.Options{Addr: b.proxy.addr(), MaxRetries: 3, MinRetryBackoff: time.Millisecond})
	t.Cleanup(func() { client.Close() })

	raw := b.key("qty:", 1)
	b.proxy.arm("hincrby")
	if err := client.HIncrBy(ctx, raw, "1", -1).Err(); err != nil {
		t.Fatal(err)
	}
	if got := b.qty(t, 1, 1); got != 8 {
		t.Fatalf("bare HINCRBY -1 through a resending client: quantity %d, want 8 (applied twice)", got)
	}

	b.proxy.arm(redisstore.ScriptHash("reserve"))
	res, err := b.via.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "cart-1", Lines: []reservation.Line{line(1, 3, 1)}, TTL: time.Minute})
	if err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve through a resending client: %+v %v", res, err)
	}
	if got := b.qty(t, 1, 1); got != 5 {
		t.Errorf("quantity %d after a resent reserve, want 5 (8 - 3, once)", got)
	}

	b.proxy.arm(redisstore.ScriptHash("adjust"))
	if _, err := b.via.Adjust(ctx, &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Delta: 4}); err != nil {
		t.Fatal(err)
	}
	if got := b.qty(t, 1, 1); got != 9 {
		t.Errorf("quantity %d after a resent adjust of +4, want 9 (once)", got)
	}
	if b.proxy.dropped.Load() != 3 {
		t.Errorf("proxy dropped %d replies, want 3: the test did not exercise every resend", b.proxy.dropped.Load())
	}
}

// An adjust whose reply was lost after the ledger changed and the Redis
// quantity followed: the merchant's retry with the same key changes
// neither again (the ledger replays the key with the same change id, whose
// marker the quantity already has). The control, without a key, adds
// twice: why the API takes an Idempotency-Key.
func TestLostAdjustReplyWithKeyAppliesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		key  string
		want int64
	}{{"restock-7", 13}, {"", 16}} {
		t.Run("key="+tc.key, func(t *testing.T) {
			t.Parallel()
			b := setupLostReply(t, -1)
			b.stock(t, 1, 1, 10)
			plus3 := &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Delta: 3, Key: tc.key}
			b.proxy.arm(redisstore.ScriptHash("adjust"))
			if _, err := b.via.Adjust(ctx, plus3); err == nil || !isConnErr(err) {
				t.Fatalf("adjust with its reply dropped: %v, want a connection error", err)
			}
			res, err := b.via.Adjust(ctx, plus3)
			if err != nil || res.Replayed != (tc.key != "") {
				t.Fatalf("retry: %+v %v", res, err)
			}
			b.settled(t, tc.want, "after the retry")
		})
	}
}
