package server

import (
	"time"

	"github.com/seed31b0e981/reservoir/rollout/flagsource"
)

// RejectedView is a flags document this replica's flag source refused,
// as /admin/rollout/status shows it (and the dashboard's red banner).
type RejectedView struct {
	// Error says why: the line and column of a syntax error, or the JSON
	// path (and line and column) of the offending value.
	Error string `json:"error"`
	// At is when the source refused it.
	At time.Time `json:"at"`
	// LastValidInForce is true when the source answers from the last valid
	// document meanwhile; false when none has loaded since the replica
	// started (it then serves no reservation call: flags_loaded is false).
	LastValidInForce bool `json:"last_valid_in_force"`
}

// rejectedView is the source's refusal of its newest document, or nil.
func rejectedView(src *flagsource.Source) *RejectedView {
	at, err := src.Rejected()
	if err == nil {
		return nil
	}
	return &RejectedView{Error: err.Error(), At: at, LastValidInForce: src.Loaded()}
}
