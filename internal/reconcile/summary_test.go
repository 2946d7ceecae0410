package reconcile_test

import (
	"strings"
	"testing"

	"github.com/seed31b0e981/reservoir/internal/reconcile"
)

// notesOf makes n notes of kind, the first repaired of them fixed by a
// repair.
func notesOf(kind string, n, repaired int) []reconcile.Finding {
	out := make([]reconcile.Finding, n)
	for i := range out {
		out[i] = reconcile.Finding{Shop: 1001, Side: "mysql", Kind: kind, Note: true, Repaired: i < repaired}
	}
	return out
}

// Issue 27, observation 7: after the demo's `reconcile --repair` the
// summary read "65 repaired, 0 left; 159 notes, not drift (empty_pool 79,
// shadow_extra_hold 80)" and did not say whether the 80 injected holds
// (MySQL's shadow holds that Redis, deciding, does not have) were removed.
// A repair's summary says what the repair removed and what remains.
func TestSummarySaysWhatTheRepairRemovedAndWhatRemains(t *testing.T) {
	incident := reconcile.Report{Pod: "pod-a", Shops: 2, Repair: true,
		Findings: make([]reconcile.Finding, 65), Counts: map[string]int{"over_projected": 65}, Repaired: 65,
		Notes:      append(notesOf("empty_pool", 79, 0), notesOf("shadow_extra_hold", 80, 80)...),
		NoteCounts: map[string]int{"empty_pool": 79, "shadow_extra_hold": 80}}
	for _, c := range []struct {
		name      string
		rep       reconcile.Report
		want, not []string
	}{
		{"the demo's incident", incident,
			[]string{"65 repaired, 0 left", "159 notes, not drift (empty_pool 79, shadow_extra_hold 80)",
				"the repair removed 80 of MySQL's shadow holds that Redis does not have (shadow_extra_hold), 0 of them remain",
				"79 notes remain (empty_pool 79)"}, nil},
		{"every kind of shadow note", reconcile.Report{Pod: "p", Shops: 1, Repair: true,
			Notes:      append(append(notesOf("shadow_extra_hold", 2, 1), notesOf("shadow_missing_hold", 3, 3)...), notesOf("shadow_hold_mismatch", 1, 1)...),
			NoteCounts: map[string]int{"shadow_extra_hold": 2, "shadow_missing_hold": 3, "shadow_hold_mismatch": 1}},
			[]string{"no drift; 6 notes, not drift",
				"the repair removed 1 of MySQL's shadow holds that Redis does not have (shadow_extra_hold), 1 of them remains",
				"copied 3 of Redis's holds into MySQL's shadow (shadow_missing_hold), 0 of them remain",
				"rewrote 1 of MySQL's shadow holds to Redis's allocations (shadow_hold_mismatch), 0 of them remain",
				"1 note remains (shadow_extra_hold 1)"}, nil},
		{"a repair that fixed no note", reconcile.Report{Pod: "p", Shops: 1, Repair: true,
			Notes: notesOf("empty_pool", 2, 0), NoteCounts: map[string]int{"empty_pool": 2}},
			[]string{"2 notes, not drift (empty_pool 2): the repair changed none of them, 2 notes remain (empty_pool 2)"}, []string{"removed"}},
		{"a repair after which every note is gone", reconcile.Report{Pod: "p", Shops: 1, Repair: true,
			Notes: notesOf("empty_pool", 2, 2), NoteCounts: map[string]int{"empty_pool": 2}},
			[]string{"2 notes, not drift (empty_pool 2): the look after the repair no longer finds 2 (empty_pool), 0 of them remain; no note remains"}, nil},
		{"a repair that fixed no drift", reconcile.Report{Pod: "p", Shops: 1, Repair: true,
			Findings: make([]reconcile.Finding, 2), Counts: map[string]int{"quantity_mismatch": 2}, Left: 2},
			[]string{"pod p: 1 shop, 2 drift findings (quantity_mismatch 2), 0 repaired, 2 left"}, nil},
		{"a look, no repair", reconcile.Report{Pod: "p", Shops: 1,
			Notes: notesOf("shadow_extra_hold", 2, 0), NoteCounts: map[string]int{"shadow_extra_hold": 2}},
			[]string{"pod p: 1 shop, no drift; 2 notes, not drift (shadow_extra_hold 2)"}, []string{"remain", "repair"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.rep.Summary()
			for _, w := range c.want {
				if !strings.Contains(s, w) {
					t.Errorf("summary %q\nwant %q in it", s, w)
				}
			}
			for _, n := range c.not {
				if strings.Contains(s, n) {
					t.Errorf("summary %q\nwant no %q in it", s, n)
				}
			}
		})
	}
}
