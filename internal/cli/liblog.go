package cli

import (
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Library logs. flagd's in-process resolver, which every flag source runs,
// logs through a zap logger of its own that it builds on os.Stderr, and it
// takes no logger from its caller (flagd provider v0.6.0; go-sdk-contrib
// issue 522): every command that opened the flags printed flagd's INFO
// JSON lines. Run therefore points os.Stderr at a pipe before anything
// reads it, and what arrives there is dropped unless a command's -v
// forwards it. The Go runtime writes a panic or a fatal error to file
// descriptor 2 itself: those are never caught.

// libraryLogs is the pipe os.Stderr points at, and where it is forwarded.
type libraryLogs struct {
	mu   sync.Mutex
	to   io.Writer // nil: dropped
	done chan struct{}
}

// captured is set by CaptureLibraryLogs, once per process.
var captured atomic.Pointer[libraryLogs]

// CaptureLibraryLogs points os.Stderr at a pipe whose content is dropped
// unless a command's -v forwards it, and returns the process's stderr (for
// the commands' own messages) and release, which ends the capture and
// waits a second at most for what is being forwarded. Call it first in
// main, before any goroutine: os.Stderr is a plain variable. A library
// that copied os.Stderr earlier (the log package's default logger did, at
// init) is not captured.
func CaptureLibraryLogs() (stderr *os.File, release func()) {
	stderr = os.Stderr
	r, w, err := os.Pipe()
	if err != nil {
		return stderr, func() {}
	}
	l := &libraryLogs{done: make(chan struct{})}
	go l.drain(r)
	os.Stderr = w
	captured.Store(l)
	return stderr, func() {
		w.Close()
		select {
		case <-l.done:
		case <-time.After(time.Second):
		}
	}
}

// drain reads the pipe until it is closed, forwarding or dropping.
func (l *libraryLogs) drain(r *os.File) {
	defer close(l.done)
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			l.mu.Lock()
			if l.to != nil {
				_, _ = l.to.Write(buf[:n])
			}
			l.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// libraryLogger is the logger an operator command hands the cell (and so
// the flag source): with -v, errOut at debug level, and what libraries
// write on os.Stderr is forwarded there too; without, nothing.
func libraryLogger(verbose bool, errOut io.Writer) *slog.Logger {
	if !verbose {
		return slog.New(slog.DiscardHandler)
	}
	showLibraryLogs(errOut)
	return slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// showLibraryLogs forwards what libraries write on os.Stderr to w, when
// CaptureLibraryLogs holds it back.
func showLibraryLogs(w io.Writer) {
	if l := captured.Load(); l != nil {
		l.mu.Lock()
		l.to = w
		l.mu.Unlock()
	}
}
