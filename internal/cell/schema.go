package cell

import (
	"context"
	"sync"

	"github.com/seed31b0e981/reservoir/migrations"
)

// SchemaState is one database's schema against the migration set this
// binary embeds for its role.
type SchemaState struct {
	// Pod names the pod ("control" for the control database).
	Pod string
	// Set is the migration set the database must have: migrations.Control
	// for the control database, migrations.Pod for a pod's.
	Set *migrations.Set
	// State is what Set.Check found; zero when Err is set.
	State migrations.State
	// Err is why the schema could not be read: the driver's own error,
	// which can name users and hosts (never a password).
	Err error
}

// Schema checks, concurrently and within ctx, the control database's
// schema against the control set and every pod's against the pod set
// (Set.Check), control first, then the pods in topology order. A database
// that is both (the control DSN names a pod's database) is checked for
// each role against that role's set. It only reads goose's version tables
// (a small query or two per database) and changes nothing: the cell never
// migrates (`reservoir migrate` does).
func (c *Cell) Schema(ctx context.Context) []SchemaState {
	out := make([]SchemaState, len(c.pods)+1)
	var wg sync.WaitGroup
	wg.Go(func() {
		st, err := migrations.Control.Check(ctx, c.Control)
		out[0] = SchemaState{Pod: "control", Set: migrations.Control, State: st, Err: err}
	})
	for i, p := range c.pods {
		wg.Go(func() {
			st, err := migrations.Pod.Check(ctx, p.DB)
			out[i+1] = SchemaState{Pod: p.Name, Set: migrations.Pod, State: st, Err: err}
		})
	}
	wg.Wait()
	return out
}
