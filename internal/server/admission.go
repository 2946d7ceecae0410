package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed31b0e981/reservoir/internal/cell"
)

// Admission of a checkout API call, in the order the checks run. Each
// check is cheaper than the next and costs the server less than what it
// protects:
//
//  0. A place on the checkout listener (placeListener): at most
//     MaxConns connections are open at once, and the next ones wait in
//     the kernel's accept queue, unread: a flood costs the replica the
//     work of MaxConns connections at a time, however many it opens.
//     While every place is taken, a connection serves one call and
//     closes (its answer says Connection: close) and a keep-alive
//     connection idle for a second is closed, so the places go round the
//     waiting connections in turn. The admin listener has no such cap, and what
//     it serves (the kill switch) and what the flags need (the flag feed,
//     the heartbeat) run beside the flood's MaxConns connections instead
//     of behind all of them in the Go scheduler's run queue.
//  1. The client's bearer token and its rights (401, 403): headers only.
//  2. The Content-Type (415): a browser's cross-site form or text/plain
//     POST never reaches a handler.
//  3. The declared Content-Length (413 at once): a client announcing more
//     than MaxBodyBytes is not read at all.
//  4. The body, read whole and bounded, before any slot is taken, against
//     a budget of body bytes in flight (503 when spent): slow senders hold
//     a goroutine and their own bytes, never a store's connection, and
//     together never more than BodyBytesInFlight.
//  5. A slot of the shop's pod, as many as the pod's MySQL pool has
//     connections, waiting at most PodQueueWait in a queue as long again
//     (503 with Retry-After): a burst fails fast instead of waiting
//     RequestTimeout for a connection.
//
// Only then does the handler run, with RequestTimeout.

// placeListener is the checkout listener with its places (step 0): Accept
// takes a place, waiting while there is none (the connections waiting
// stay in the kernel's accept queue), and the connection gives it back
// when it closes. While Accept waits, the connections idle for at least
// placeIdle are closed: a keep-alive connection holds its place while it
// waits for its client's next call. One idle for less is likely to carry
// that call at once (closing it then would cut the call), and gives its
// place up with its next answer instead (Connection: close, apiOp).
type placeListener struct {
	net.Listener
	places    chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	// open counts the connections open: places holds one more while
	// Accept waits in the kernel for the next connection.
	open atomic.Int64

	mu   sync.Mutex
	idle map[*placeConn]time.Time // idle connections, since when
	// closedIdle counts the idle connections closed for a place, and
	// waited the times Accept found every place taken.
	closedIdle, waited atomic.Int64
}

// placeIdle is how long a connection is idle before it gives its place up
// to a connection waiting.
const placeIdle = time.Second

func newPlaceListener(ln net.Listener, n int) *placeListener {
	return &placeListener{Listener: ln, places: make(chan struct{}, n), done: make(chan struct{}), idle: map[*placeConn]time.Time{}}
}

// Accept implements net.Listener.
func (l *placeListener) Accept() (net.Conn, error) {
	select {
	case l.places <- struct{}{}:
	default:
		l.waited.Add(1)
		if !l.waitPlace() {
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.places
		return nil, err
	}
	l.open.Add(1)
	return &placeConn{Conn: c, l: l}, nil
}

// waitPlace waits for a place, closing the connections idle for
// placeIdle meanwhile; false when the listener closed first.
func (l *placeListener) waitPlace() bool {
	tick := time.NewTicker(placeIdle / 4)
	defer tick.Stop()
	for {
		l.closeIdle(placeIdle)
		select {
		case l.places <- struct{}{}:
			return true
		case <-l.done:
			return false
		case <-tick.C:
		}
	}
}

// Close implements net.Listener: it ends an Accept waiting for a place.
func (l *placeListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// full reports whether every place is taken by an open connection.
func (l *placeListener) full() bool { return l.open.Load() >= int64(cap(l.places)) }

// rotate makes the answer w close its connection while every place is
// taken: the connection serves this call and gives its place to the next
// one waiting.
func (l *placeListener) rotate(w http.ResponseWriter) {
	if l.full() {
		w.Header().Set("Connection", "close")
	}
}

// connState is the http.Server's ConnState: it keeps the idle
// connections and since when.
func (l *placeListener) connState(c net.Conn, st http.ConnState) {
	pc, ok := c.(*placeConn)
	if !ok {
		return
	}
	if st != http.StateIdle {
		l.forget(pc)
		return
	}
	l.mu.Lock()
	l.idle[pc] = time.Now()
	l.mu.Unlock()
}

func (l *placeListener) forget(pc *placeConn) {
	l.mu.Lock()
	delete(l.idle, pc)
	l.mu.Unlock()
}

// closeIdle closes the connections idle for at least min, as the idle
// timeout would: a client that sends its next call on one at that moment
// finds it closed, and retries (the checkout API's calls are idempotent
// on their token).
func (l *placeListener) closeIdle(min time.Duration) {
	now := time.Now()
	var idle []*placeConn
	l.mu.Lock()
	for pc, since := range l.idle {
		if now.Sub(since) >= min {
			idle = append(idle, pc)
			delete(l.idle, pc)
		}
	}
	l.mu.Unlock()
	for _, pc := range idle {
		l.closedIdle.Add(1)
		_ = pc.Close()
	}
}

// placeConn is a checkout connection holding a place.
type placeConn struct {
	net.Conn
	l    *placeListener
	once sync.Once
}

// Close implements net.Conn: the place goes to the next connection.
func (c *placeConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.forget(c)
		c.l.open.Add(-1)
		<-c.l.places
	})
	return err
}

// CloseWrite lets net/http half-close the connection after an answer
// that left a request body unread, as it does a TCP connection.
func (c *placeConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// podGate limits the calls served at once for one pod.
type podGate struct {
	slots   chan struct{}
	waiting atomic.Int64
}

func newPodGate(n int) *podGate { return &podGate{slots: make(chan struct{}, n)} }

// enter takes a slot, waiting at most wait while no more callers than
// slots wait already. It returns false when the call must be shed.
func (g *podGate) enter(r *http.Request, wait time.Duration) bool {
	select {
	case g.slots <- struct{}{}:
		return true
	default:
	}
	if g.waiting.Add(1) > int64(cap(g.slots)) {
		g.waiting.Add(-1)
		return false
	}
	defer g.waiting.Add(-1)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return true
	case <-t.C:
	case <-r.Context().Done():
	}
	return false
}

func (g *podGate) leave() { <-g.slots }

// podSlots is the pod's in-flight limit: its MySQL pool's size, the
// resource every call of a pod in mysql mode (and every shadow) needs.
func podSlots(p *cell.Pod) int {
	if n := p.DB.Stats().MaxOpenConnections; n > 0 {
		return n
	}
	return 64
}

// apiOp registers a checkout API route: op names the operation the
// client's roles must allow; withBody says the route takes a JSON body.
func (s *Server) apiOp(mux *http.ServeMux, pattern, op string, withBody bool, h http.HandlerFunc) {
	s.route(mux, pattern, false, func(w http.ResponseWriter, r *http.Request) {
		if l := s.places.Load(); l != nil {
			l.rotate(w)
		}
		r, p := s.admit(w, r, op, withBody)
		if p != nil {
			if p.Status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="reservoir"`)
			}
			s.metrics.refused.WithLabelValues(p.Code).Inc()
			writeProblem(w, r, *p)
			return
		}
		defer s.unadmit(r)
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		h(w, r.WithContext(ctx))
	})
}

// admitted is what admit took for a request, to give back after it.
type admitted struct {
	gate  *podGate
	bytes int64
}

type admittedKey struct{}

// admit runs checks 1-5 for a call of op. On success it returns the
// request to serve: its body has been read into memory (its Body replays
// it) and a slot of the shop's pod is held; unadmit gives both back.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, op string, withBody bool) (*http.Request, *problem) {
	var client *Client
	if cs := s.clients.Load(); cs != nil {
		c, p := cs.authenticate(r)
		if p != nil {
			return r, p
		}
		client = c
	}
	shop, pod, p := s.podOf(r)
	if p != nil {
		return r, p
	}
	if client != nil {
		if p := client.permit(op, shop); p != nil {
			return r, p
		}
	}
	if p := checkContentType(r, withBody); p != nil {
		return r, p
	}
	a := &admitted{}
	if withBody {
		if r.ContentLength > s.cfg.MaxBodyBytes {
			w.Header().Set("Connection", "close")
			return r, &problem{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
				Message: fmt.Sprintf("the request body exceeds %d bytes", s.cfg.MaxBodyBytes)}
		}
		n := r.ContentLength
		if n < 0 {
			n = s.cfg.MaxBodyBytes // chunked: it may be this long
		}
		if s.bodyBytes.Add(n) > s.cfg.BodyBytesInFlight {
			s.bodyBytes.Add(-n)
			w.Header().Set("Connection", "close")
			return r, &problem{Status: http.StatusServiceUnavailable, Code: "overloaded", RetryAfter: time.Second,
				Message: "the server is reading its maximum of request bodies at once; retry shortly"}
		}
		a.bytes = n
		data, err := readBody(w, r, s.cfg.MaxBodyBytes)
		if err != nil {
			s.bodyBytes.Add(-n)
			return r, s.bodyReadProblem(r, err)
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
	}
	g := s.gates[pod.Name]
	if !g.enter(r, s.cfg.PodQueueWait) {
		s.bodyBytes.Add(-a.bytes)
		return r, &problem{Status: http.StatusServiceUnavailable, Code: "overloaded", RetryAfter: time.Second,
			Message: fmt.Sprintf("pod %s is serving its maximum of %d calls and %d more are waiting; nothing was done; retry shortly", pod.Name, cap(g.slots), cap(g.slots))}
	}
	a.gate = g
	return r.WithContext(context.WithValue(r.Context(), admittedKey{}, a)), nil
}

// unadmit gives back what admit took for r.
func (s *Server) unadmit(r *http.Request) {
	a, _ := r.Context().Value(admittedKey{}).(*admitted)
	if a == nil {
		return
	}
	a.gate.leave()
	s.bodyBytes.Add(-a.bytes)
}

// readBody reads r's body whole, at most limit bytes, into a buffer sized
// by its Content-Length (so a short body costs only its own bytes).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	size := r.ContentLength
	if size < 0 || size > limit {
		size = 512
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+1))
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	return buf.Bytes(), err
}

// checkContentType refuses a call whose Content-Type is not JSON: a body
// must be application/json (a charset, if given, utf-8), and a call
// without one may send no Content-Type other than that. A cross-site
// form or text/plain POST from a browser is refused before anything is
// read.
func checkContentType(r *http.Request, withBody bool) *problem {
	ct := r.Header.Get("Content-Type")
	if ct == "" && !withBody {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || cs == "utf-8" || cs == "UTF-8" {
			return nil
		}
	}
	got := strconv.Quote(ct)
	if ct == "" {
		got = "none"
	}
	return &problem{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type", Field: "Content-Type",
		Message: "Content-Type must be application/json, got " + got}
}
