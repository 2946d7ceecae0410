package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/reservation"
)

// problem is an error answer. Every non-2xx response body is one, as JSON:
//
//	{"error": "invalid_input", "message": "...", "field": "lines[0].quantity", "request_id": "..."}
type problem struct {
	// Status is the HTTP status.
	Status int `json:"-"`
	// Code is a stable, machine-readable word (docs/api.md lists them).
	Code string `json:"error"`
	// Message says what is wrong in words a caller can act on.
	Message string `json:"message"`
	// Field names the offending input, when there is one: a JSON path
	// ("lines[2].quantity"), a path parameter ("shop") or a query
	// parameter ("limit").
	Field string `json:"field,omitempty"`
	// RequestID is the request's id, to find it in the server's log.
	RequestID string `json:"request_id,omitempty"`
	// RetryAfter, when set, becomes a Retry-After header.
	RetryAfter time.Duration `json:"-"`
	// Extra holds answer-specific data (the short lines of an
	// insufficient reserve).
	Extra map[string]any `json:"-"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		http.Error(w, `{"error":"internal","message":"response encoding failed"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func writeProblem(w http.ResponseWriter, r *http.Request, p problem) {
	p.RequestID = RequestID(r.Context())
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(1, p.RetryAfter.Round(time.Second)/time.Second))))
	}
	if len(p.Extra) == 0 {
		writeJSON(w, p.Status, p)
		return
	}
	body := map[string]any{"error": p.Code, "message": p.Message, "request_id": p.RequestID}
	if p.Field != "" {
		body["field"] = p.Field
	}
	for k, v := range p.Extra {
		body[k] = v
	}
	writeJSON(w, p.Status, body)
}

func badInput(field, format string, args ...any) *problem {
	return &problem{Status: http.StatusBadRequest, Code: "invalid_input", Field: field, Message: fmt.Sprintf(format, args...)}
}

// decodeBody reads a JSON object into v: at most MaxBodyBytes, no unknown
// fields, nothing after the object. Its problems name what is wrong: the
// byte offset of a syntax error, the unknown field by its full path, the
// field of a wrong type.
//
// The body is read whole (at most MaxBodyBytes) before it is decoded.
// json.Decoder buffers a whole value before decoding it anyway, so this
// costs about the same memory, and it keeps the transport's failures
// apart from the JSON's: a client that stalls or drops mid-body gets an
// answer about that, never a "malformed JSON" quoting the connection's
// error (and with it the socket addresses). It also leaves the bytes at
// hand to find where an unknown field is.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) *problem {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return s.bodyReadProblem(r, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if err == nil {
		// One object only: anything after it makes the request malformed.
		if _, terr := dec.Token(); terr == io.EOF {
			return nil
		}
		return &problem{Status: http.StatusBadRequest, Code: "malformed_json", Message: "malformed JSON: unexpected data after the JSON object"}
	}
	var (
		syntax  *json.SyntaxError
		typ     *json.UnmarshalTypeError
		unknown = "json: unknown field "
	)
	switch {
	case errors.Is(err, io.EOF):
		return &problem{Status: http.StatusBadRequest, Code: "malformed_json", Message: "the request body is empty: want a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &problem{Status: http.StatusBadRequest, Code: "malformed_json", Message: "malformed JSON: the body ends in the middle of a value"}
	case errors.As(err, &syntax):
		return &problem{Status: http.StatusBadRequest, Code: "malformed_json",
			Message: fmt.Sprintf("malformed JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))}
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return &problem{Status: http.StatusBadRequest, Code: "malformed_json",
				Message: fmt.Sprintf("want a JSON object, got %s", typ.Value)}
		}
		// encoding/json names the field without array indexes
		// ("lines.quantity"); the value's place in the document says which
		// line it is.
		if at := valuePathAt(data, typ.Offset); stripIndexes(at) == strings.ToLower(field) {
			field = at
		}
		return &problem{Status: http.StatusBadRequest, Code: "invalid_input", Field: field,
			Message: fmt.Sprintf("%s: want %s, got %s", field, jsonKind(typ.Type.Kind().String()), typ.Value)}
	case strings.HasPrefix(err.Error(), unknown):
		// encoding/json names the key only ("bogus", quoted with %q), not
		// where it is.
		name := strings.TrimPrefix(err.Error(), unknown)
		if n, uerr := strconv.Unquote(name); uerr == nil {
			name = n
		}
		field := unknownFieldPath(data, reflect.TypeOf(v))
		if field == "" || !strings.HasSuffix(field, name) {
			field = name // the walk disagrees with encoding/json: trust json's word
		}
		return &problem{Status: http.StatusBadRequest, Code: "unknown_field", Field: field,
			Message: fmt.Sprintf("unknown field %q (see docs/api.md for the request's fields)", field)}
	default:
		// Decoding from memory: the error is about the JSON, not the
		// connection.
		return &problem{Status: http.StatusBadRequest, Code: "malformed_json", Message: "malformed JSON: " + err.Error()}
	}
}

// bodyReadProblem answers a failure reading the body (not parsing it).
// The error's text is logged, never returned: a network error names both
// socket addresses ("read tcp 10.0.0.5:8080->10.0.0.9:51234: i/o
// timeout").
func (s *Server) bodyReadProblem(r *http.Request, err error) *problem {
	var (
		tooBig *http.MaxBytesError
		ne     net.Error
	)
	switch {
	case errors.As(err, &tooBig):
		return &problem{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
			Message: fmt.Sprintf("the request body exceeds %d bytes", tooBig.Limit)}
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		// The connection's read deadline (the http.Server's ReadTimeout)
		// passed before the body's last byte arrived: the client stalled.
		// The connection can still be written (WriteTimeout is a
		// separate deadline), so the client gets this answer; net/http
		// then closes the connection, whose unread rest cannot be
		// skipped.
		s.log.Info("server: request body timed out", "request_id", RequestID(r.Context()), "err", err)
		return &problem{Status: http.StatusRequestTimeout, Code: "request_timeout",
			Message: fmt.Sprintf("the request body did not arrive within the server's read timeout (%s); send it whole and promptly", s.cfg.ReadTimeout)}
	default:
		// The client closed or reset the connection mid-body (or sent less
		// than its Content-Length): it will most likely never read this.
		s.log.Info("server: request body unreadable", "request_id", RequestID(r.Context()), "err", err)
		return &problem{Status: http.StatusBadRequest, Code: "body_unreadable",
			Message: "the request body could not be read whole: the connection failed or ended before its end"}
	}
}

// valuePathAt returns the path ("lines[1].quantity") of the value in data
// at which encoding/json reported a type error at byte offset off: a
// scalar that ends there, or an object or array whose opening delimiter
// does (json reports those just after it). It returns "" if no value
// matches.
func valuePathAt(data []byte, off int64) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	found := ""
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if dec.InputOffset() == off {
			found = path
			return nil
		}
		delim, ok := tok.(json.Delim)
		if !ok {
			return nil
		}
		for i := 0; dec.More() && found == ""; i++ {
			if delim == '[' {
				err = walk(fmt.Sprintf("%s[%d]", path, i))
			} else {
				key, kerr := dec.Token()
				if kerr != nil {
					return kerr
				}
				err = walk(joinPath(path, fmt.Sprint(key)))
			}
			if err != nil {
				return err
			}
		}
		if found != "" {
			return nil
		}
		_, err = dec.Token() // the closing delimiter
		return err
	}
	_ = walk("")
	return found
}

// joinPath appends a key to a JSON path.
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// stripIndexes is a path as encoding/json names fields: no indexes, and
// lower case (its matching of keys to fields ignores case).
func stripIndexes(path string) string {
	var b strings.Builder
	depth := 0
	for _, r := range path {
		switch {
		case r == '[':
			depth++
		case r == ']':
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return strings.ToLower(b.String())
}

// unknownFieldPath finds, in data (a JSON value encoding/json refused
// with an unknown-field error when decoding it into a t), the full path
// of the first key that t has no field for: "colour", "lines[0].bogus".
// encoding/json's error names the key only. It walks the value's tokens
// in document order, the order encoding/json decodes in, so the key it
// finds is the one json reported. It returns "" if it finds none.
func unknownFieldPath(data []byte, t reflect.Type) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	path, _ := walkUnknown(dec, t, "")
	return path
}

// walkUnknown consumes one JSON value from dec, decoded as a t would be,
// and returns the path of the first key no field of t takes (path is the
// value's own path). An object or array t does not describe (t is an
// interface, or wants something else) is skipped whole: encoding/json
// does not look inside it for unknown fields either.
func walkUnknown(dec *json.Decoder, t reflect.Type, path string) (string, error) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return "", nil // a scalar
	}
	switch {
	case delim == '{' && t != nil && t.Kind() == reflect.Struct:
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return "", err
			}
			name, _ := key.(string)
			sub := childPath(path, name)
			f, ok := jsonField(t, name)
			if !ok {
				return sub, nil
			}
			if p, err := walkUnknown(dec, f.Type, sub); p != "" || err != nil {
				return p, err
			}
		}
	case delim == '{' && t != nil && t.Kind() == reflect.Map:
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return "", err
			}
			name, _ := key.(string)
			if p, err := walkUnknown(dec, t.Elem(), childPath(path, name)); p != "" || err != nil {
				return p, err
			}
		}
	case delim == '[' && t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		for i := 0; dec.More(); i++ {
			if p, err := walkUnknown(dec, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); p != "" || err != nil {
				return p, err
			}
		}
	default:
		// Skip the rest of this object or array, nested values included.
		for depth := 1; depth > 0; {
			tok, err := dec.Token()
			if err != nil {
				return "", err
			}
			switch tok {
			case json.Delim('{'), json.Delim('['):
				depth++
			case json.Delim('}'), json.Delim(']'):
				depth--
			}
		}
		return "", nil
	}
	_, err = dec.Token() // the closing '}' or ']'
	return "", err
}

// childPath is the path of key name inside the object at path.
func childPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// jsonField finds the field of struct type t that encoding/json decodes
// key into: the exported field whose JSON name (its tag's, else its Go
// name) is key, or failing that equals it case-insensitively, as
// encoding/json matches. Fields of embedded structs without a tag are
// searched as if they were t's own; a field tagged "-" takes nothing.
func jsonField(t reflect.Type, key string) (reflect.StructField, bool) {
	var fold *reflect.StructField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			if ef, ok := jsonField(ft, key); ok {
				return ef, true
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f, true
		}
		if fold == nil && strings.EqualFold(name, key) {
			fold = &f
		}
	}
	if fold != nil {
		return *fold, true
	}
	return reflect.StructField{}, false
}

// jsonKind says a Go kind the way a JSON caller thinks of it.
func jsonKind(kind string) string {
	switch kind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	case "bool":
		return "true or false"
	default:
		return kind
	}
}

// validation turns a *reservation.ValidationError into a 400 naming its
// field; field renames map the store's parameter names to the API's.
func validation(err error, renames map[string]string) *problem {
	var ve *reservation.ValidationError
	if !errors.As(err, &ve) {
		return badInput("", "%v", err)
	}
	field := ve.Field
	if to, ok := renames[field]; ok {
		field = to
	}
	return badInput(field, "%s: %s", field, ve.Reason)
}

// storeProblem maps a facade error to its answer (docs/api.md, "Client
// contract", says what a caller does with each). A domain answer (404,
// 409, 410, 400) is definite. Everything else is a 503 whose outcome is
// unknown: the caller retries the same call with the same token until it
// gets a definite answer, and never refunds on it. The errors that say
// the outcome is unknown are checked first: whatever they wrap, no
// answer comes with them (docs/ownership.md, section 6).
func (s *Server) storeProblem(r *http.Request, pod string, err error) *problem {
	switch {
	case errors.Is(err, dualwrite.ErrFlagsUnavailable):
		// The facade logged it (rate-limited) and counted it in
		// reservoir_dualwrite_flags_unavailable_total.
		return &problem{Status: http.StatusServiceUnavailable, Code: "flags_unavailable", RetryAfter: time.Second,
			Message: "this replica cannot read its flags, so it does not know which store decides the shop; nothing was done; " +
				"retry the same call (another replica may answer)"}
	case errors.Is(err, reservation.ErrClaimInProgress):
		return &problem{Status: http.StatusServiceUnavailable, Code: "claim_in_progress", RetryAfter: time.Second,
			Message: "a claim of this token is in progress and its outcome is not known yet; nothing was released; retry the same call"}
	case errors.Is(err, dualwrite.ErrDeciderUnreachable):
		s.log.Warn("server: the shop's deciding store could not be reached", "request_id", RequestID(r.Context()), "pod", pod, "err", err)
		return &problem{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: time.Second,
			Message: "the store that decides this shop could not be reached (a handoff between the stores did not finish); " +
				"the outcome is unknown: retry the same call with the same token"}
	case errors.Is(err, reservation.ErrInvalidInput):
		return validation(err, nil)
	case errors.Is(err, reservation.ErrNotFound):
		return &problem{Status: http.StatusNotFound, Code: "not_found", Message: "no such reservation (or item x location) in this shop"}
	case errors.Is(err, reservation.ErrExpired):
		return &problem{Status: http.StatusGone, Code: "expired", Message: "the reservation expired before it was claimed; its units went back to stock"}
	case errors.Is(err, reservation.ErrReleased):
		return &problem{Status: http.StatusConflict, Code: "released",
			Message: "the reservation was released; a released token is never claimed or reserved again: use a new token"}
	case errors.Is(err, reservation.ErrAlreadyClaimed):
		return &problem{Status: http.StatusConflict, Code: "already_claimed", Message: "this token's reservation was already claimed"}
	case errors.Is(err, reservation.ErrTokenConflict):
		return &problem{Status: http.StatusConflict, Code: "token_conflict", Message: "this token already holds a reservation with different lines; use a new token per cart"}
	case errors.Is(err, reservation.ErrInsufficientStock):
		return &problem{Status: http.StatusConflict, Code: "insufficient_stock", Message: "the ledger no longer has the stock for this change (a merchant lowered it)"}
	case errors.Is(err, reservation.ErrContention):
		return &problem{Status: http.StatusServiceUnavailable, Code: "contention", RetryAfter: time.Second,
			Message: "the store could not settle the answer under contention; nothing was held; retry the same call"}
	}
	s.log.Error("server: authority store failed", "request_id", RequestID(r.Context()), "pod", pod, "err", err)
	msg := "the store that decides this shop did not answer; the outcome is unknown: retry the same call with the same token"
	if errors.Is(err, context.DeadlineExceeded) {
		msg = fmt.Sprintf("the store that decides this shop did not answer within %s; the outcome is unknown: retry the same call with the same token", s.cfg.RequestTimeout)
	}
	return &problem{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: time.Second, Message: msg}
}
