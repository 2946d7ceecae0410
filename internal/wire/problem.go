package wire

// Problem is the body of every answer that is not 2xx, on both listeners:
// an RFC 9457 problem details object, sent as application/problem+json
// (docs/api.md lists the codes and their type URIs):
//
//	{"type": "tag:reservoir,2026:problem/invalid_input", "title": "Invalid input", "status": 400,
//	 "detail": "...", "instance": "/v1/shops/1001/reservations",
//	 "error": "invalid_input", "message": "...", "field": "lines[0].quantity", "request_id": "..."}
//
// type, title, status, detail and instance are RFC 9457's members; error
// (the stable code to switch on), message (the same words as detail) and
// the rest are its extension members. A few codes carry more: a refused
// reserve (insufficient) its short lines, a refused advance (gates_fail)
// every gate.
type Problem struct {
	// Type is a URI naming the problem's kind, one per error code:
	// "tag:reservoir,2026:problem/<code>".
	Type string `json:"type"`
	// Title is a short summary of the kind, the same for every answer of
	// the code.
	Title string `json:"title"`
	// Status is the HTTP status of the answer.
	Status int `json:"status"`
	// Detail says what is wrong in this answer, in words a caller can act
	// on (the same as Message).
	Detail string `json:"detail"`
	// Instance is the request's path; left out when not known.
	Instance string `json:"instance,omitempty"`
	// Error is a stable, machine-readable code ("invalid_input",
	// "unavailable", ...).
	Error string `json:"error"`
	// Message says what is wrong in words a caller can act on (kept for
	// the clients written before Detail).
	Message string `json:"message"`
	// Field names the offending input: a JSON path ("lines[2].quantity"),
	// a path parameter ("shop"), a query parameter ("limit") or a header
	// ("Idempotency-Key"); left out when no input is at fault.
	Field string `json:"field,omitempty"`
	// RequestID is the request's id, to find it in the server's log.
	RequestID string `json:"request_id,omitempty"`
	// Pod is the shop's pod on a refused reserve (insufficient); left out
	// otherwise.
	Pod string `json:"pod,omitempty"`
	// Short lists the lines a refused reserve could not serve
	// (insufficient); left out otherwise.
	Short []ShortLine `json:"short,omitempty"`
	// Replayed is true when a refused reserve is the token's first
	// refusal, replayed (insufficient); left out otherwise.
	Replayed bool `json:"replayed,omitempty"`
	// Gates are every exit gate of the stage in force, with its numbers,
	// on a refused advance (gates_fail); left out otherwise.
	Gates []GateResult `json:"gates,omitempty"`
	// RoleNeeded is the least admin role the route needs, on a 403
	// forbidden of the admin API; left out otherwise.
	RoleNeeded string `json:"role_needed,omitempty"`
	// RoleHeld is the role the caller's admin identity holds, beside
	// RoleNeeded; left out otherwise.
	RoleHeld string `json:"role_held,omitempty"`
}
