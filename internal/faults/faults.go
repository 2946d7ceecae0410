// Package faults puts Shopify's toxiproxy, run in process, between the code
// under test and a real server, and injects the network failures the fault
// matrix needs: a latency spike, a black-holed connection (timeout), a
// reset peer, a server that is down, a server that restarts, and a lost
// reply (the command ran, its answer never came back).
//
// It owns the proxies and nothing else: it never restarts or reconfigures
// the shared test servers (scripts/services), so a "down" or "restarted"
// server is the proxy refusing and cutting connections, which is all a
// client can tell apart anyway. Clients must reach the server through
// Proxy.Addr over TCP (for MySQL: a DSN with tcp(Addr), never the unix
// socket, which would bypass the proxy).
package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Kind names a fault.
type Kind string

// The faults, in the order the matrix runs them.
const (
	// Latency delays every reply (server to client) by Fault.Latency ±
	// Fault.Jitter: a slow network or an overloaded server.
	Latency Kind = "latency"
	// Timeout drops everything the client sends and keeps the connections
	// open: requests never arrive, callers wait for their deadline. Healing
	// cuts the stalled connections (toxiproxy closes them when the toxic is
	// removed), as a real stateful firewall timing out would.
	Timeout Kind = "timeout"
	// ResetPeer resets every connection as soon as the client sends on it.
	// New connections get an RST; connections that already existed when
	// the fault started are closed (toxiproxy sets SO_LINGER 0 only on links
	// it creates while the toxic is in place).
	ResetPeer Kind = "reset_peer"
	// Down stops the proxy: open connections are cut, new ones refused,
	// until healed.
	Down Kind = "down"
	// Restart cuts every connection and refuses new ones for
	// Fault.Downtime, then accepts again: what clients see of a server
	// restart. Pooled connections are all dead afterwards. It repeats
	// every Fault.Every until healed.
	Restart Kind = "restart"
	// LostReply lets requests through but drops the replies, in blips of
	// Fault.Blip every Fault.Every; each blip ends by cutting the
	// connections whose replies it ate. A command sent during a blip ran on
	// the server and its caller never heard: the outcome is unknown, the
	// case idempotency keys exist for.
	LostReply Kind = "lost_reply"
)

// Kinds lists every fault.
var Kinds = []Kind{Latency, Timeout, ResetPeer, Down, Restart, LostReply}

// Fault is a fault to inject with its shape. Zero fields take defaults.
type Fault struct {
	Kind Kind
	// Latency is the added reply delay (Latency). Default: 300ms.
	Latency time.Duration
	// Jitter spreads Latency by ± this much (Latency). Default: 100ms.
	Jitter time.Duration
	// Downtime is how long a restart refuses connections (Restart).
	// Default: 150ms.
	Downtime time.Duration
	// Blip is how long replies are dropped each time (LostReply).
	// Default: 60ms.
	Blip time.Duration
	// Every is the period of restarts and of lost-reply blips (Restart,
	// LostReply). Default: 400ms for Restart, 200ms for LostReply.
	Every time.Duration
}

// WithDefaults returns f with zero fields set to their defaults.
func (f Fault) WithDefaults() Fault {
	if f.Latency == 0 {
		f.Latency = 300 * time.Millisecond
	}
	if f.Jitter == 0 {
		f.Jitter = 100 * time.Millisecond
	}
	if f.Downtime == 0 {
		f.Downtime = 150 * time.Millisecond
	}
	if f.Blip == 0 {
		f.Blip = 60 * time.Millisecond
	}
	if f.Every == 0 {
		f.Every = 200 * time.Millisecond
		if f.Kind == Restart {
			f.Every = 400 * time.Millisecond
		}
	}
	return f
}

// Validate reports a fault that cannot be injected.
func (f Fault) Validate() error {
	known := false
	for _, k := range Kinds {
		known = known || k == f.Kind
	}
	switch {
	case !known:
		return fmt.Errorf("faults: unknown kind %q", f.Kind)
	case f.Latency < time.Millisecond || f.Jitter < 0 || f.Jitter > f.Latency:
		return fmt.Errorf("faults: latency %s ± %s: want latency >= 1ms and 0 <= jitter <= latency (toxiproxy counts whole milliseconds)", f.Latency, f.Jitter)
	case f.Downtime <= 0 || f.Blip <= 0:
		return fmt.Errorf("faults: downtime %s, blip %s: both must be > 0", f.Downtime, f.Blip)
	case f.Kind == Restart && f.Every <= f.Downtime:
		return fmt.Errorf("faults: restart every %s with downtime %s: the period must exceed the downtime", f.Every, f.Downtime)
	case f.Kind == LostReply && f.Every <= f.Blip:
		return fmt.Errorf("faults: lost reply every %s with blips of %s: the period must exceed the blip", f.Every, f.Blip)
	}
	return nil
}

// api is the toxiproxy server every proxy of the process belongs to. Its
// HTTP API is never started: proxies and toxics are driven through the Go
// API, so nothing listens but the proxies themselves.
var api = sync.OnceValue(func() *toxiproxy.ApiServer {
	return toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
})

// Proxy is one toxiproxy proxy listening on 127.0.0.1 in front of a
// server. At most one fault is active on it at a time. Safe for concurrent
// use.
type Proxy struct {
	name string
	addr string

	mu     sync.Mutex // serialises start/stop and toxic changes
	p      *toxiproxy.Proxy
	active *Injection
}

// Start starts a proxy named name (for logs) in front of upstream
// (host:port) on a free loopback port, and stops it when the test ends.
func Start(tb testing.TB, name, upstream string) *Proxy {
	tb.Helper()
	p, err := NewProxy(name, upstream)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}

// NewProxy starts a proxy in front of upstream on a free loopback port.
// Close stops it.
func NewProxy(name, upstream string) (*Proxy, error) {
	px := toxiproxy.NewProxy(api(), name, "127.0.0.1:0", upstream)
	if err := px.Start(); err != nil {
		return nil, fmt.Errorf("faults: start proxy %s to %s: %w", name, upstream, err)
	}
	// Start has resolved the port; restarts listen on the same one, so
	// clients keep dialling one address across a "server restart".
	return &Proxy{name: name, addr: px.Listen, p: px}, nil
}

// Addr is the address clients must dial (host:port).
func (p *Proxy) Addr() string { return p.addr }

// Name is the proxy's name.
func (p *Proxy) Name() string { return p.name }

// Close heals any active fault and stops the proxy.
func (p *Proxy) Close() {
	p.mu.Lock()
	a := p.active
	p.mu.Unlock()
	if a != nil {
		_ = a.Heal()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.p.Stop()
}

// Injection is an active fault. Heal ends it.
type Injection struct {
	p     *Proxy
	fault Fault
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	err   error
	// loop, when set, runs until stop is closed (restart, lost reply).
	loop func(stop <-chan struct{}) error
	// undo heals a fault that is a standing state (toxic, proxy down).
	undo func() error
}

// Fault is the fault being injected.
func (i *Injection) Fault() Fault { return i.fault }

// Inject starts a fault. It fails if another fault is active on the proxy.
func (p *Proxy) Inject(f Fault) (*Injection, error) {
	f = f.WithDefaults()
	if err := f.Validate(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active != nil {
		return nil, fmt.Errorf("faults: proxy %s already has %s active", p.name, p.active.fault.Kind)
	}
	in := &Injection{p: p, fault: f, stop: make(chan struct{}), done: make(chan struct{})}
	var err error
	switch f.Kind {
	case Latency:
		in.undo, err = p.addToxicLocked("fault_latency", "latency", "downstream",
			fmt.Sprintf(`{"latency":%d,"jitter":%d}`, f.Latency.Milliseconds(), f.Jitter.Milliseconds()))
	case Timeout:
		// timeout 0: never close on its own; removal closes the link.
		in.undo, err = p.addToxicLocked("fault_timeout", "timeout", "upstream", `{"timeout":0}`)
	case ResetPeer:
		in.undo, err = p.addToxicLocked("fault_reset_peer", "reset_peer", "upstream", `{"timeout":0}`)
	case Down:
		p.p.Stop()
		in.undo = p.restartLocked
	case Restart:
		p.p.Stop()
		in.loop = func(stop <-chan struct{}) error { return p.restartLoop(f, stop) }
	case LostReply:
		var undo func() error
		if undo, err = p.addLostReplyLocked(); err == nil {
			in.loop = func(stop <-chan struct{}) error { return p.lostReplyLoop(f, undo, stop) }
		}
	}
	if err != nil {
		return nil, err
	}
	p.active = in
	go func() {
		defer close(in.done)
		if in.loop != nil {
			in.err = in.loop(in.stop)
		}
	}()
	return in, nil
}

// Heal ends the fault and waits until the proxy passes traffic normally
// again. Connections the fault broke stay broken: clients reconnect.
func (i *Injection) Heal() error {
	i.once.Do(func() {
		close(i.stop)
		<-i.done
		i.p.mu.Lock()
		defer i.p.mu.Unlock()
		err := i.err
		if i.undo != nil {
			err = errors.Join(err, i.undo())
		}
		// A loop may have ended between a stop and its start.
		if !i.p.p.Enabled {
			err = errors.Join(err, i.p.restartLocked())
		}
		i.p.active = nil
		i.err = err
	})
	return i.err
}

// addToxicLocked adds a toxic through toxiproxy's Go API (the same JSON its
// HTTP API takes) and returns the function that removes it.
func (p *Proxy) addToxicLocked(name, typ, stream, attrs string) (func() error, error) {
	doc := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(doc)); err != nil {
		return nil, fmt.Errorf("faults: proxy %s: add %s toxic: %w", p.name, typ, err)
	}
	return func() error {
		if err := p.p.Toxics.RemoveToxic(context.Background(), name); err != nil {
			return fmt.Errorf("faults: proxy %s: remove %s toxic: %w", p.name, typ, err)
		}
		return nil
	}, nil
}

// restartLocked starts a stopped proxy on its old address. A port another
// process grabbed in the meantime fails it; retry briefly, since the only
// likely holder is a socket of ours in teardown.
func (p *Proxy) restartLocked() error {
	if p.p.Enabled {
		return nil
	}
	var err error
	for range 20 {
		if err = p.p.Start(); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("faults: proxy %s: listen again on %s: %w", p.name, p.addr, err)
}

// restartLoop restarts the proxy every Every: the caller has stopped it
// already (so the fault is in force when Inject returns); it waits
// Downtime, starts it again, and stops it again at the next period, until
// stop is closed.
func (p *Proxy) restartLoop(f Fault, stop <-chan struct{}) error {
	for {
		if !sleep(stop, f.Downtime) {
			return nil // Heal starts it
		}
		p.mu.Lock()
		err := p.restartLocked()
		p.mu.Unlock()
		if err != nil || !sleep(stop, f.Every-f.Downtime) {
			return err
		}
		p.mu.Lock()
		p.p.Stop()
		p.mu.Unlock()
	}
}

// lostReplyLoop drops replies for Blip every Every: the caller has added
// the first blip's toxic (undo removes it). The drop is toxiproxy's timeout
// toxic on the downstream (server to client) stream: requests still reach
// the server and run; removing the toxic closes the links whose replies it
// swallowed, so no client ever reads a later reply as the answer to an
// earlier request.
func (p *Proxy) lostReplyLoop(f Fault, undo func() error, stop <-chan struct{}) error {
	for {
		stopped := !sleep(stop, f.Blip)
		p.mu.Lock()
		err := undo()
		p.mu.Unlock()
		if err != nil || stopped || !sleep(stop, f.Every-f.Blip) {
			return err
		}
		p.mu.Lock()
		undo, err = p.addLostReplyLocked()
		p.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

func (p *Proxy) addLostReplyLocked() (func() error, error) {
	return p.addToxicLocked("fault_lost_reply", "timeout", "downstream", `{"timeout":0}`)
}

// sleep waits d or until stop is closed; it reports whether d passed.
func sleep(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}
