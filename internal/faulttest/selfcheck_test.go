package faulttest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// recordingTB keeps the failures a check reports instead of failing the
// test, so a test can assert that the check fails.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recordingTB) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	panic(fatal{}) // ends the check; recovered by the caller
}

func (r *recordingTB) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

func (r *recordingTB) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errors) > 0
}

type fatal struct{}

// doubleDeduct is a MySQL store that skips the claims row's guard: a claim
// the store answers as a replay is deducted from the ledger again and
// answered as a fresh claim.
type doubleDeduct struct{ *mysqlstore.Store }

func (s doubleDeduct) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, p)
	if err != nil || !res.Replayed || p.As != reservation.AsAuthority {
		return res, err
	}
	for _, a := range res.Allocations {
		if _, err := s.AdjustStock(ctx, &reservation.AdjustParams{Shop: p.Shop, Item: a.Item, Location: a.Location, Delta: -a.Quantity}); err != nil {
			return reservation.ClaimResult{}, err
		}
	}
	res.Replayed = false
	return res, nil
}

// The matrix's checks can fail: a cell whose MySQL store deducts a
// repeated claim twice (a checkout retrying a claim it already got an
// answer for) breaks the caller rule, the ledger rule and the history.
func TestCellChecksCatchADoubleDeduction(t *testing.T) {
	t.Parallel()
	tm := cellTimings()
	c := setup(t, mode{"mysql", authority.ModeMySQL, authority.KillOff}, tm, cellOptions{wrap: func(s *mysqlstore.Store) reservation.Store { return doubleDeduct{s} }})
	checkFails(t, c, "want replayed", "deductions and claims disagree", "not linearizable")
}

// The kill column's checks can fail: the same cell with MySQL's change
// feed kept from Redis (the mirror Disabled: no relay, no drain at the
// handoff) forgets across the kill switch what MySQL decided, and the
// checks say so: the reservations acknowledged before the kill switch and
// claimed after it are refused, and Redis refuses stock the ledger has
// (the history).
func TestCellChecksCatchAnUndrainedKillSwitch(t *testing.T) {
	t.Parallel()
	c := setup(t, mode{"kill", authority.ModeMySQL, authority.KillRedis}, cellTimings(), cellOptions{noFeed: true})
	checkFails(t, c, "acknowledged reservation answered", "not linearizable")
}

// checkFails runs a cell's traffic and checks, and fails the test unless
// the checks report a failure mentioning each of wants.
func checkFails(t *testing.T, c *cell, wants ...string) {
	t.Helper()
	r := newRun(c)
	r.traffic(t)
	rec := &recordingTB{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil {
				if _, ok := p.(fatal); !ok {
					panic(p)
				}
			}
		}()
		r.check(rec, serverMySQL, "")
	}()
	all := strings.Join(rec.errors, "\n")
	t.Logf("the checks reported %d failures, among them:\n%s", len(rec.errors), strings.Join(rec.errors[max(0, len(rec.errors)-5):], "\n"))
	for _, want := range wants {
		if !strings.Contains(all, want) {
			t.Errorf("no failure mentioning %q", want)
		}
	}
}
