package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// failingBody yields prefix, then fails with err: a connection that broke
// or timed out mid-body.
type failingBody struct {
	prefix *strings.Reader
	err    error
}

func (b *failingBody) Read(p []byte) (int, error) {
	if b.prefix.Len() > 0 {
		return b.prefix.Read(p)
	}
	return 0, b.err
}

// TestBodyReadFailuresNameNoAddress proves, in process, that a body whose
// reading fails answers about the transport, never "malformed JSON", and
// never with the error's text: a timeout (the read deadline passed)
// answers 408 request_timeout, a reset connection or a body shorter than
// its Content-Length 400 body_unreadable, and no answer contains the
// socket addresses the network error carries. The server's log has the
// error, for the operator.
func TestBodyReadFailuresNameNoAddress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	opErr := func(err error) error {
		return &net.OpError{Op: "read", Net: "tcp", Err: err,
			Source: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 8080},
			Addr:   &net.TCPAddr{IP: net.IPv4(10, 9, 8, 7), Port: 51234}}
	}
	cases := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"read deadline passed", opErr(os.ErrDeadlineExceeded), http.StatusRequestTimeout, "request_timeout"},
		{"connection reset", opErr(syscall.ECONNRESET), http.StatusBadRequest, "body_unreadable"},
		{"body shorter than Content-Length", io.ErrUnexpectedEOF, http.StatusBadRequest, "body_unreadable"},
	}
	for _, c := range cases {
		for _, path := range []string{"/v1/shops/1001/reservations", "/v1/shops/1001/items/7/locations/1/adjust"} {
			req := httptest.NewRequest("POST", path, &failingBody{prefix: strings.NewReader(`{"token": "t1", "lines": [`), err: c.err})
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			e.srv.Handler().ServeHTTP(rec, req)
			var p struct{ Error, Message, RequestID string }
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("%s %s: not JSON: %s", c.name, path, rec.Body)
			}
			if rec.Code != c.status || p.Error != c.code || p.Message == "" {
				t.Errorf("%s %s: %d %s, want %d %s", c.name, path, rec.Code, rec.Body, c.status, c.code)
			}
			for _, leak := range []string{"10.1.2.3", "10.9.8.7", "8080", "51234", "tcp"} {
				if strings.Contains(rec.Body.String(), leak) {
					t.Errorf("%s %s: the answer echoes the network error (%q): %s", c.name, path, leak, rec.Body)
				}
			}
		}
	}
	if logs := e.log.String(); !strings.Contains(logs, "10.9.8.7:51234") {
		t.Error("the body read errors are not in the server's log")
	}
}

// TestStalledBodyAnswers408 is the regression case over a real
// connection: a client sends its headers and part of its JSON body, then
// nothing. The http.Server's ReadTimeout (2s here) sets the connection's
// read deadline, so the handler's body read fails with an i/o timeout
// whose text names both socket addresses. The connection can still be
// written (WriteTimeout is a separate, later deadline), so the client
// gets an answer before net/http closes the connection: it must be 408
// request_timeout without the addresses, not 400 malformed_json quoting
// "read tcp 127.0.0.1:x->127.0.0.1:y: i/o timeout". No duration is
// asserted: only that an answer comes before the client's own 30s limit.
func TestStalledBodyAnswers408(t *testing.T) {
	t.Parallel()
	e, addr := floodEnv(t)
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	part := `{"token": "stalled", "lines": [{"item": 7, `
	if _, err := fmt.Fprintf(conn, "POST /v1/shops/1001/reservations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		len(part)+64, part); err != nil {
		t.Fatal(err)
	}
	// ... and nothing more: the client stalls mid-body.
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("no answer within 30s: the server neither answered nor closed: %v", err)
		}
		t.Fatalf("the server closed the connection without an answer: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var p struct{ Error, Message string }
	_ = json.Unmarshal(body, &p)
	if res.StatusCode != http.StatusRequestTimeout || p.Error != "request_timeout" || p.Message == "" {
		t.Fatalf("a stalled body: %d %s, want 408 request_timeout", res.StatusCode, body)
	}
	_, clientPort, _ := net.SplitHostPort(conn.LocalAddr().String())
	_, serverPort, _ := net.SplitHostPort(addr)
	for _, leak := range []string{"127.0.0.1", clientPort, serverPort, "i/o timeout"} {
		if bytes.Contains(body, []byte(leak)) {
			t.Errorf("the answer contains %q: %s", leak, body)
		}
	}
	if !strings.Contains(e.log.String(), "request body timed out") {
		t.Error("the stalled body is not in the server's log")
	}
}
