package server

import (
	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/rollout/flagsource"
)

// rejected is the source's refusal of its newest flags document, as
// /admin/rollout/status shows it (and the dashboard's red banner), or nil.
func rejected(src *flagsource.Source) *wire.FlagsRejected {
	at, err := src.Rejected()
	if err == nil {
		return nil
	}
	return &wire.FlagsRejected{Error: err.Error(), At: at.UTC(), LastValidInForce: src.Loaded()}
}
