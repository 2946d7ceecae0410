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

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/internal/breaker"
	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/reservation"
)

// problem is an error answer: every non-2xx response body is one, as a
// wire.Problem, an RFC 9457 problem details object sent as
// application/problem+json whatever the request's Accept:
//
//	{"type": "tag:reservoir,2026:problem/invalid_input", "title": "Invalid input", "status": 400,
//	 "detail": "...", "instance": "/v1/shops/1001/reservations",
//	 "error": "invalid_input", "message": "...", "field": "lines[0].quantity", "request_id": "..."}
//
// Its Code must be a key of problemTitles (a test walks the package's
// sources for every code they answer).
type problem struct {
	// Status is the HTTP status.
	Status int
	// Code is a stable, machine-readable word (docs/api.md lists them).
	Code string
	// Message says what is wrong in words a caller can act on.
	Message string
	// Field names the offending input, when there is one: a JSON path
	// ("lines[2].quantity"), a path parameter ("shop") or a query
	// parameter ("limit").
	Field string
	// RetryAfter, when set, becomes a Retry-After header.
	RetryAfter time.Duration
	// Extra holds what a few codes carry beside the message (a refused
	// reserve's short lines, a refused advance's gates): the fields of
	// wire.Problem that are not the ones above.
	Extra wire.Problem
}

// ProblemContentType is the media type of every error answer (RFC 9457).
const ProblemContentType = "application/problem+json"

// problemTypePrefix starts every problem's type URI: the code follows. A
// tag URI (RFC 4151) names the kind stably without claiming a web address
// the project does not own; docs/api.md documents each.
const problemTypePrefix = "tag:reservoir,2026:problem/"

// ProblemType is the RFC 9457 type URI of an error code.
func ProblemType(code string) string { return problemTypePrefix + code }

// problemTitles is every error code the server answers, with its RFC 9457
// title: short, the same for every answer of the code (the detail says
// what happened this time). A code missing here fails
// TestEveryCodeHasATitle.
var problemTitles = map[string]string{
	"invalid_input":          "Invalid input",
	"unknown_field":          "Unknown field",
	"duplicate_key":          "Duplicate key",
	"malformed_json":         "Malformed JSON",
	"unknown_shop":           "Unknown shop",
	"body_unreadable":        "Request body unreadable",
	"unauthorized":           "Unauthorized",
	"admin_disabled":         "Admin API disabled",
	"forbidden":              "Forbidden",
	"not_found":              "Not found",
	"no_route":               "No such route",
	"not_run":                "Not reconciled yet",
	"method_not_allowed":     "Method not allowed",
	"request_timeout":        "Request body timed out",
	"insufficient":           "Insufficient stock to reserve",
	"already_claimed":        "Already claimed",
	"released":               "Reservation released",
	"token_conflict":         "Token holds other lines",
	"key_conflict":           "Idempotency key reused",
	"insufficient_stock":     "Ledger stock too low",
	"flags_changed":          "Flags changed meanwhile",
	"refused":                "Kill switch refused: Redis not current",
	"gates_fail":             "Gates do not pass",
	"kill_engaged":           "Kill switch engaged",
	"modes_external":         "Modes served elsewhere",
	"redis_not_current":      "Redis not current for handback",
	"confirm_mysql_only":     "mysql_only needs confirmation",
	"stage_changed":          "Rollout stage changed",
	"plan_complete":          "Rollout plan complete",
	"expired":                "Reservation expired",
	"body_too_large":         "Request body too large",
	"unsupported_media_type": "Unsupported media type",
	"internal":               "Internal server error",
	"no_reconciler":          "No reconciler",
	"no_plan":                "No rollout plan",
	"unavailable":            "Store did not answer",
	"store_unavailable":      "Store failing: call not sent",
	"flags_unavailable":      "Flags unavailable",
	"claim_in_progress":      "Claim in progress",
	"overloaded":             "Overloaded",
	"contention":             "Store contention",
}

// problemTitle is code's title; an unknown code (a bug: the tests catch
// it) falls back to the HTTP status text.
func problemTitle(code string, status int) string {
	if t, ok := problemTitles[code]; ok {
		return t
	}
	return http.StatusText(status)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	writeBody(w, status, "application/json", v)
}

func writeBody(w http.ResponseWriter, status int, contentType string, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		w.Header().Set("Content-Type", ProblemContentType)
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"type":"`+ProblemType("internal")+`","title":"`+problemTitles["internal"]+
			`","status":500,"detail":"response encoding failed","error":"internal","message":"response encoding failed"}`+"\n")
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func writeProblem(w http.ResponseWriter, r *http.Request, p problem) {
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(1, p.RetryAfter.Round(time.Second)/time.Second))))
	}
	body := p.Extra
	body.Type, body.Title, body.Status = ProblemType(p.Code), problemTitle(p.Code, p.Status), p.Status
	body.Detail, body.Instance = p.Message, r.URL.EscapedPath()
	body.Error, body.Message, body.Field, body.RequestID = p.Code, p.Message, p.Field, RequestID(r.Context())
	writeBody(w, p.Status, ProblemContentType, body)
}

func badInput(field, format string, args ...any) *problem {
	return &problem{Status: http.StatusBadRequest, Code: "invalid_input", Field: field, Message: fmt.Sprintf(format, args...)}
}

// decodeBody reads a JSON object into v strictly: at most MaxBodyBytes,
// no unknown member, no member twice, names matched exactly as the API
// spells them ("token", never "TOKEN"), valid UTF-8, and nothing after the
// object. Its problems name what is wrong: the byte offset of a syntax
// error, and the offending member by its full path ("lines[1].quantity")
// for an unknown, repeated or mistyped one. JSON v2 semantics
// (github.com/go-json-experiment/json) do the checking and report each
// error's place as a JSON Pointer.
//
// The body is read whole (at most MaxBodyBytes) before it is decoded
// (admit already read it for the checkout API), which keeps the
// transport's failures apart from the JSON's: a client that stalls or
// drops mid-body gets an answer about that, never a "malformed JSON"
// quoting the connection's error (and with it the socket addresses).
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) *problem {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return s.bodyReadProblem(r, err)
	}
	return decodeJSON(data, v)
}

// decodeJSON is decodeBody's decoding, from memory.
func decodeJSON(data []byte, v any) *problem {
	malformed := func(msg string) *problem {
		return &problem{Status: http.StatusBadRequest, Code: "malformed_json", Message: msg}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return malformed("the request body is empty: want a JSON object")
	}
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	err := jsonv2.UnmarshalDecode(dec, v, jsonv2.RejectUnknownMembers(true))
	if err == nil {
		// One object only: anything after it makes the request malformed.
		if _, terr := dec.ReadToken(); terr == io.EOF {
			return nil
		}
		return malformed("malformed JSON: unexpected data after the JSON object")
	}
	var (
		syntax   *jsontext.SyntacticError
		semantic *jsonv2.SemanticError
	)
	switch {
	case errors.As(err, &syntax) && errors.Is(syntax.Err, jsontext.ErrDuplicateName):
		field := fieldPath(syntax.JSONPointer)
		return &problem{Status: http.StatusBadRequest, Code: "duplicate_key", Field: field,
			Message: fmt.Sprintf("%q appears twice in its object; give each member once", field)}
	case errors.As(err, &syntax) && errors.Is(syntax.Err, io.ErrUnexpectedEOF):
		return malformed("malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &syntax):
		return malformed(fmt.Sprintf("malformed JSON at byte %d: %s", syntax.ByteOffset, syntaxReason(syntax)))
	case errors.As(err, &semantic) && errors.Is(semantic.Err, jsonv2.ErrUnknownName):
		field := fieldPath(semantic.JSONPointer)
		return &problem{Status: http.StatusBadRequest, Code: "unknown_field", Field: field,
			Message: fmt.Sprintf("unknown field %q (names are matched exactly; see docs/api.md for the request's fields)", field)}
	case errors.As(err, &semantic):
		field := fieldPath(semantic.JSONPointer)
		got := jsonKindName(semantic.JSONKind)
		if field == "" {
			return malformed("want a JSON object, got " + got)
		}
		want := "a valid value"
		if semantic.GoType != nil {
			want = goKindName(semantic.GoType.Kind())
		}
		if len(semantic.JSONValue) > 0 && len(semantic.JSONValue) <= 32 {
			got += " " + string(semantic.JSONValue)
		}
		return &problem{Status: http.StatusBadRequest, Code: "invalid_input", Field: field,
			Message: fmt.Sprintf("%s: want %s, got %s", field, want, got)}
	}
	return malformed("malformed JSON")
}

// syntaxReason is a syntax error's reason without the library's prefix
// and place (the message gives the byte offset).
func syntaxReason(e *jsontext.SyntacticError) string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return "invalid JSON"
}

// fieldPath turns a JSON Pointer ("/lines/1/quantity") into the API's
// field path ("lines[1].quantity"): array indexes in brackets, member
// names joined by dots. The request types have no maps, so a segment of
// digits is an index.
func fieldPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.ParseUint(tok, 10, 64); err == nil && tok != "" {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// jsonKindName says a JSON kind in words.
func jsonKindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a value"
}

// goKindName says a Go kind the way a JSON caller thinks of it.
func goKindName(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Bool:
		return "true or false"
	}
	return k.String()
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
	case errors.Is(err, breaker.ErrOpen):
		// The cell logged the breaker's opening; a line per refused call
		// would flood the log while a store is down.
		var open *breaker.OpenError
		errors.As(err, &open)
		return &problem{Status: http.StatusServiceUnavailable, Code: "store_unavailable", RetryAfter: time.Second,
			Message: open.Name + " is failing (" + open.Why + "), so the call was not sent to it; other pods are served as usual; " +
				"retry the same call with the same token shortly (an operator may move the pod to the other store with the kill switch)"}
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
