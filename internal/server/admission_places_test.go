package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// placesServer serves h on a placeListener of n places, each call
// answered through rotate as the checkout API answers.
func placesServer(t *testing.T, n int, h http.HandlerFunc) (*placeListener, string, func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pl := newPlaceListener(ln, n)
	hs := &http.Server{ConnState: pl.connState, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pl.rotate(w)
		h(w, r)
	})}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(pl) }()
	stop := sync.OnceValue(func() error {
		_ = hs.Close()
		select {
		case err := <-served:
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		case <-time.After(5 * time.Second):
			return fmt.Errorf("Serve still running 5s after Close")
		}
	})
	t.Cleanup(func() { _ = stop() })
	return pl, ln.Addr().String(), stop
}

// call is one keep-alive connection to a test server.
type call struct {
	conn net.Conn
	rd   *bufio.Reader
}

func dial(t *testing.T, addr string) *call {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return &call{conn: c, rd: bufio.NewReader(c)}
}

// send writes a GET of path.
func (c *call) send(t *testing.T, path string) {
	t.Helper()
	if _, err := fmt.Fprintf(c.conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
}

// answer reads an answer: its status and whether it closes the connection.
func (c *call) answer(t *testing.T) (int, bool) {
	t.Helper()
	res, err := http.ReadResponse(c.rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, res.Close
}

// The checkout listener keeps at most its places' connections open: a
// connection beyond them is not read (its call does not start) until a
// place is free; while every place is taken each answer closes its
// connection, giving the place to the one waiting; and below the cap
// connections stay open (keep-alive).
func TestPlacesBoundTheConnectionsServed(t *testing.T) {
	t.Parallel()
	entered, release := make(chan string, 8), make(chan struct{})
	pl, addr, _ := placesServer(t, 2, func(w http.ResponseWriter, r *http.Request) {
		entered <- r.URL.Path
		if r.URL.Path != "/quick" {
			<-release
		}
	})
	a := dial(t, addr)
	a.send(t, "/quick")
	<-entered
	if status, closes := a.answer(t); status != 200 || closes {
		t.Fatalf("below the cap: %d, closes %t; want 200, kept open", status, closes)
	}
	b, c := dial(t, addr), dial(t, addr)
	a.send(t, "/a")
	b.send(t, "/b")
	for range 2 {
		<-entered
	}
	c.send(t, "/c")
	select {
	case p := <-entered:
		t.Fatalf("%s started while both places were taken", p)
	case <-time.After(300 * time.Millisecond):
	}
	if !pl.full() || pl.waited.Load() == 0 {
		t.Fatalf("both places held, and the listener says full %t, waited %d times", pl.full(), pl.waited.Load())
	}
	release <- struct{}{} // one of a and b answers
	if p := <-entered; p != "/c" {
		t.Fatalf("%s started, want /c once a place was free", p)
	}
	close(release)
	for _, k := range []*call{a, b} {
		_ = k.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	}
	closed := 0
	for _, k := range []*call{a, b, c} {
		if _, closes := k.answer(t); closes {
			closed++
		}
	}
	if closed == 0 {
		t.Error("no answer closed its connection while every place was taken")
	}
}

// A keep-alive connection idle for a second gives its place up to a
// connection waiting; one idle for less keeps it. The listener's close
// ends an Accept waiting for a place.
func TestPlacesGoFromIdleConnectionsToWaitingOnes(t *testing.T) {
	t.Parallel()
	entered, release := make(chan string, 8), make(chan struct{})
	pl, addr, stop := placesServer(t, 2, func(w http.ResponseWriter, r *http.Request) {
		entered <- r.URL.Path
		if r.URL.Path == "/held" {
			<-release
		}
	})
	idle := dial(t, addr)
	idle.send(t, "/quick")
	<-entered
	if _, closes := idle.answer(t); closes {
		t.Fatal("an answer below the cap closed its connection")
	}
	idleSince := time.Now()
	held := dial(t, addr)
	held.send(t, "/held")
	<-entered
	waiting := dial(t, addr)
	waiting.send(t, "/waiting")
	if p := <-entered; p != "/waiting" {
		t.Fatalf("%s started", p)
	}
	if waited := time.Since(idleSince); waited < placeIdle-100*time.Millisecond {
		t.Errorf("the waiting connection got a place %s after the other went idle, before placeIdle (%s)", waited, placeIdle)
	}
	_ = idle.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle.rd.ReadByte(); err == nil {
		t.Error("the idle connection is still open after giving its place up")
	}
	if n := pl.closedIdle.Load(); n != 1 {
		t.Errorf("%d idle connections closed, want 1", n)
	}
	// Every place taken again (held, waiting), and a third connection
	// waits in Accept: closing the server ends it.
	third := dial(t, addr)
	third.send(t, "/third")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	close(release)
}
