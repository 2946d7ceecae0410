package wire

// Problem is the body of every answer that is not 2xx, on both listeners
// (docs/api.md lists the codes):
//
//	{"error": "invalid_input", "message": "...", "field": "lines[0].quantity", "request_id": "..."}
//
// A few codes carry more: a refused reserve (insufficient) its short lines,
// a refused advance (gates_fail) every gate.
type Problem struct {
	// Error is a stable, machine-readable code ("invalid_input",
	// "unavailable", ...).
	Error string `json:"error"`
	// Message says what is wrong in words a caller can act on.
	Message string `json:"message"`
	// Field names the offending input: a JSON path ("lines[2].quantity"),
	// a path parameter ("shop"), a query parameter ("limit") or a header
	// ("Idempotency-Key"); left out when no input is at fault.
	Field string `json:"field,omitempty"`
	// RequestID is the request's id, to find it in the server's log.
	RequestID string `json:"request_id,omitempty"`
	// Status is "insufficient" on a refused reserve (insufficient); left
	// out otherwise.
	Status string `json:"status,omitempty"`
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
}
