package faults_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/internal/faults"
	"github.com/seed31b0e981/reservoir/internal/testredis"
)

// client dials Redis through the proxy the way redisstore requires (no
// resends) and honours context deadlines, so a stalled call ends when the
// caller gives up.
func client(t *testing.T, p *faults.Proxy) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: 300 * time.Millisecond, PoolSize: 4})
	t.Cleanup(func() { c.Close() })
	return c
}

func incr(c *redis.Client, key string, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err := c.Incr(ctx, key).Err()
	return time.Since(start), err
}

// Every fault does to a real server's client what its doc says, and healing
// gives a working path back.
func TestEachFaultAndHeal(t *testing.T) {
	t.Parallel()
	r := testredis.New(t)
	direct := r.Client
	for _, kind := range faults.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			p := faults.Start(t, "redis-"+string(kind), testredis.Addr(t))
			c := client(t, p)
			key := fmt.Sprintf("%s{faults}:%s", r.Prefix, kind)
			if _, err := incr(c, key, time.Second); err != nil {
				t.Fatalf("before the fault: %v", err)
			}
			in, err := p.Inject(faults.Fault{Kind: kind, Every: time.Second, Downtime: 500 * time.Millisecond, Blip: 900 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Inject(faults.Fault{Kind: faults.Latency}); err == nil {
				t.Error("a second fault on the same proxy was accepted")
			}
			took, err := incr(c, key, 250*time.Millisecond)
			switch kind {
			case faults.Latency:
				if err == nil && took < 150*time.Millisecond {
					t.Errorf("latency: INCR took %s, want >= 200ms (300ms ± 100ms)", took)
				}
			default:
				if err == nil {
					t.Errorf("%s: INCR succeeded in %s during the fault", kind, took)
				}
			}
			if err := in.Heal(); err != nil {
				t.Fatal(err)
			}
			// The pool may still hold a connection the fault broke: one
			// failure is allowed, the next call must work.
			if _, err := incr(c, key, time.Second); err != nil {
				if _, err := incr(c, key, time.Second); err != nil {
					t.Fatalf("after healing: %v", err)
				}
			}
			n, err := direct.Get(context.Background(), key).Int()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s, counter %d", kind, took, n)
			if kind == faults.LostReply && n < 3 {
				t.Errorf("lost reply: counter %d, want >= 3: the INCR whose reply was lost still ran", n)
			}
		})
	}
}

// A lost reply is the command applied and the caller told nothing: the
// counter moves, the caller sees an error.
func TestLostReplyAppliesTheCommand(t *testing.T) {
	t.Parallel()
	r := testredis.New(t)
	p := faults.Start(t, "redis-lost", testredis.Addr(t))
	c := client(t, p)
	key := r.Prefix + "{faults}:lost"
	// Warm the connection: a reply lost during the client's handshake
	// (HELLO) would stop the INCR from ever being sent.
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	in, err := p.Inject(faults.Fault{Kind: faults.LostReply, Blip: 2 * time.Second, Every: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Heal()
	_, err = incr(c, key, 300*time.Millisecond)
	var ne net.Error
	if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("INCR with its reply dropped: %v, want a timeout at the caller's deadline", err)
	}
	if n, err := r.Client.Get(context.Background(), key).Int(); err != nil || n != 1 {
		t.Fatalf("counter %d (%v), want 1: the command ran", n, err)
	}
}

func TestFaultValidate(t *testing.T) {
	bad := []faults.Fault{
		{Kind: "flood"},
		{Kind: faults.Latency, Latency: 10 * time.Millisecond, Jitter: 20 * time.Millisecond},
		{Kind: faults.Restart, Downtime: time.Second, Every: time.Second},
		{Kind: faults.LostReply, Blip: time.Second, Every: 500 * time.Millisecond},
	}
	for _, f := range bad {
		if err := f.WithDefaults().Validate(); err == nil {
			t.Errorf("%+v: accepted", f)
		}
	}
	for _, k := range faults.Kinds {
		if err := (faults.Fault{Kind: k}).WithDefaults().Validate(); err != nil {
			t.Errorf("%s with defaults: %v", k, err)
		}
	}
}
