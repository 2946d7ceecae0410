package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

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
// byte offset of a syntax error, the unknown field, the field of a wrong
// type.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) *problem {
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		// One object only: anything after it makes the request malformed.
		_, terr := dec.Token()
		var mbe *http.MaxBytesError
		switch {
		case terr == io.EOF:
			return nil
		case errors.As(terr, &mbe):
			err = terr
		default:
			return &problem{Status: http.StatusBadRequest, Code: "malformed_json", Message: "malformed JSON: unexpected data after the JSON object"}
		}
	}
	var (
		syntax  *json.SyntaxError
		typ     *json.UnmarshalTypeError
		tooBig  *http.MaxBytesError
		unknown = "json: unknown field "
	)
	switch {
	case errors.As(err, &tooBig):
		return &problem{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
			Message: fmt.Sprintf("the request body exceeds %d bytes", tooBig.Limit)}
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
		return &problem{Status: http.StatusBadRequest, Code: "invalid_input", Field: field,
			Message: fmt.Sprintf("%s: want %s, got %s", field, jsonKind(typ.Type.Kind().String()), typ.Value)}
	case strings.HasPrefix(err.Error(), unknown):
		name := strings.Trim(strings.TrimPrefix(err.Error(), unknown), `"`)
		return &problem{Status: http.StatusBadRequest, Code: "unknown_field", Field: name,
			Message: fmt.Sprintf("unknown field %q (see docs/api.md for the request's fields)", name)}
	default:
		return &problem{Status: http.StatusBadRequest, Code: "malformed_json", Message: "malformed JSON: " + err.Error()}
	}
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

// storeProblem maps a facade error to its answer. Domain errors are
// answers (404, 409, 410, 400); anything else means the authority did not
// answer: 503 with Retry-After, the cause logged, not returned.
func (s *Server) storeProblem(r *http.Request, pod string, err error) *problem {
	switch {
	case errors.Is(err, reservation.ErrInvalidInput):
		return validation(err, nil)
	case errors.Is(err, reservation.ErrNotFound):
		return &problem{Status: http.StatusNotFound, Code: "not_found", Message: "no such reservation (or item x location) in this shop"}
	case errors.Is(err, reservation.ErrExpired):
		return &problem{Status: http.StatusGone, Code: "expired", Message: "the reservation expired before it was claimed; its units went back to stock"}
	case errors.Is(err, reservation.ErrAlreadyClaimed):
		return &problem{Status: http.StatusConflict, Code: "already_claimed", Message: "this token's reservation was already claimed"}
	case errors.Is(err, reservation.ErrTokenConflict):
		return &problem{Status: http.StatusConflict, Code: "token_conflict", Message: "this token already holds a reservation with different lines; use a new token per cart"}
	case errors.Is(err, reservation.ErrInsufficientStock):
		return &problem{Status: http.StatusConflict, Code: "insufficient_stock", Message: "the ledger no longer has the stock for this change (a merchant lowered it)"}
	case errors.Is(err, reservation.ErrContention):
		return &problem{Status: http.StatusServiceUnavailable, Code: "contention", RetryAfter: time.Second,
			Message: "the store could not settle the answer under contention; nothing was held; retry"}
	}
	s.log.Error("server: authority store failed", "request_id", RequestID(r.Context()), "pod", pod, "err", err)
	msg := "the authority store is unavailable; nothing can be promised; retry later"
	if errors.Is(err, context.DeadlineExceeded) {
		msg = fmt.Sprintf("the authority store did not answer within %s; retry later", s.cfg.RequestTimeout)
	}
	return &problem{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: time.Second, Message: msg}
}
