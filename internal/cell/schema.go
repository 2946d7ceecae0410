package cell

import (
	"context"
	"sync"

	"github.com/seed31b0e981/reservoir/migrations"
)

// SchemaState is one database's schema against the migrations this binary
// embeds.
type SchemaState struct {
	// Pod names the pod ("control" for the control database).
	Pod string
	// State is what migrations.Check found; zero when Err is set.
	State migrations.State
	// Err is why the schema could not be read: the driver's own error,
	// which can name users and hosts (never a password).
	Err error
}

// Schema checks, concurrently and within ctx, the control database's and
// every pod's schema against the binary's migrations (migrations.Check),
// control first, then the pods in topology order. It only reads goose's
// version table (one small query per database) and changes nothing: the
// cell never migrates (`reservoir migrate` does).
func (c *Cell) Schema(ctx context.Context) []SchemaState {
	out := make([]SchemaState, len(c.pods)+1)
	var wg sync.WaitGroup
	wg.Go(func() {
		st, err := migrations.Check(ctx, c.Control)
		out[0] = SchemaState{Pod: "control", State: st, Err: err}
	})
	for i, p := range c.pods {
		wg.Go(func() {
			st, err := migrations.Check(ctx, p.DB)
			out[i+1] = SchemaState{Pod: p.Name, State: st, Err: err}
		})
	}
	wg.Wait()
	return out
}
