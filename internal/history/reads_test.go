package history

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// readScript is a scripted target that also answers GETs, in order.
type readScript struct {
	scripted
	gets []func() (reservation.Hold, error)
}

func (s *readScript) Get(context.Context, *reservation.GetParams) (reservation.Hold, error) {
	next := s.gets[0]
	s.gets = s.gets[1:]
	return next()
}

func (s *readScript) Via() string { return "replica 1" }

var (
	_ Getter = (*readScript)(nil)
	_ Router = (*readScript)(nil)
)

// The allocations of the scripted token "t" (a two-line cart), a shadow
// hold's (the same items, elsewhere), and the hold's expiry.
var (
	acked  = []reservation.Allocation{{Item: 1, Location: 1, Quantity: 2}, {Item: 2, Location: 2, Quantity: 1}}
	shadow = []reservation.Allocation{{Item: 1, Location: 2, Quantity: 2}, {Item: 2, Location: 2, Quantity: 1}}
	// expires is far enough that every GET is answered before it.
	expires = time.Now().Add(time.Hour).Truncate(time.Millisecond)
)

func reservedUntil(exp time.Time, replayed bool, as ...reservation.Allocation) func() (reservation.ReserveResult, error) {
	return func() (reservation.ReserveResult, error) {
		return reservation.ReserveResult{Status: reservation.StatusReserved, Allocations: as, ExpiresAt: exp, Replayed: replayed}, nil
	}
}

func reserveErr(err error) func() (reservation.ReserveResult, error) {
	return func() (reservation.ReserveResult, error) { return reservation.ReserveResult{}, err }
}

func holdOK(exp time.Time, as ...reservation.Allocation) func() (reservation.Hold, error) {
	return func() (reservation.Hold, error) {
		return reservation.Hold{Shop: 1, Token: "t", Allocations: as, ExpiresAt: exp}, nil
	}
}

func getErr(err error) func() (reservation.Hold, error) {
	return func() (reservation.Hold, error) { return reservation.Hold{}, err }
}

func claimOK(as ...reservation.Allocation) func() (reservation.ClaimResult, error) {
	return func() (reservation.ClaimResult, error) {
		return reservation.ClaimResult{Outcome: reservation.OutcomeClaimed, Allocations: as}, nil
	}
}

// errLost is a failure: a call that got it has an unknown outcome.
var errLost = errors.New("i/o timeout")

// readSteps records the calls of token "t" the script answers, in the
// order ops names them ("reserve", "get", "claim", "release"), and
// returns what CheckReads finds.
func readSteps(t *testing.T, s *readScript, ops ...string) ReadsResult {
	t.Helper()
	ctx := context.Background()
	rec := New()
	c := rec.Client(s)
	p := &reservation.ReserveParams{Shop: 1, Token: "t", TTL: time.Hour, Lines: []reservation.Line{
		{Item: 1, Quantity: 2, Locations: []int64{1, 2}},
		{Item: 2, Quantity: 1, Locations: []int64{2}},
	}}
	for _, op := range ops {
		switch op {
		case "reserve":
			_, _ = c.Reserve(ctx, p)
		case "get":
			_, _ = c.Get(ctx, &reservation.GetParams{Shop: 1, Token: "t"})
		case "claim":
			_, _ = c.Claim(ctx, &reservation.ClaimParams{Shop: 1, Token: "t"})
		case "release":
			_, _ = c.Release(ctx, &reservation.ReleaseParams{Shop: 1, Token: "t"})
		default:
			t.Fatalf("no op %q", op)
		}
	}
	if len(s.reserves)+len(s.claims)+len(s.releases)+len(s.gets) > 0 {
		t.Fatalf("the script has answers left over: the steps do not match it")
	}
	return CheckReads(rec.Calls(), ReadsOptions{})
}

// The reads check passes the answers a reservation's decider gives and
// fails each wrong read: a GET of a live hold that answers not found, or
// another hold (a shadow's allocations, or its expiry), a GET after an
// acknowledged claim that still sees the hold, a claim that deducts
// other allocations, and not_found for a token that held, whenever.
// Calls without an answer are not judged, and a later answer counts.
func TestCheckReads(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *readScript
		ops  []string
		// want are the violations' distinguishing words, one per violation.
		want []string
		// held, claimed, claims: how many GETs and claims were judged.
		held, claimed, claims int
	}{
		{
			name: "the decider's answers",
			s: &readScript{
				scripted: scripted{
					reserves: []func() (reservation.ReserveResult, error){reservedUntil(expires, false, acked...)},
					claims:   []func() (reservation.ClaimResult, error){claimOK(acked...)},
				},
				// The same hold, its entries in another order.
				gets: []func() (reservation.Hold, error){holdOK(expires, acked[1], acked[0]), holdOK(expires, acked...),
					getErr(fmt.Errorf("get: %w", reservation.ErrAlreadyClaimed))},
			},
			ops:  []string{"reserve", "get", "get", "claim", "get"},
			held: 2, claimed: 1, claims: 1,
		},
		{
			name: "a live hold read as not found",
			s: &readScript{
				scripted: scripted{reserves: []func() (reservation.ReserveResult, error){reservedUntil(expires, false, acked...)}},
				gets:     []func() (reservation.Hold, error){getErr(fmt.Errorf("get: %w", reservation.ErrNotFound))},
			},
			ops:  []string{"reserve", "get"},
			want: []string{"said not_found (get: reservation: not found), but the hold was live"},
			held: 1,
		},
		{
			name: "a shadow hold's allocations read as the reservation",
			s: &readScript{
				scripted: scripted{reserves: []func() (reservation.ReserveResult, error){reservedUntil(expires, false, acked...)}},
				gets:     []func() (reservation.Hold, error){holdOK(expires, shadow...)},
			},
			ops:  []string{"reserve", "get"},
			want: []string{"said held [item 1 location 2 x2, item 2 location 2 x1]"},
			held: 1,
		},
		{
			name: "a shadow hold's expiry read as the reservation's",
			s: &readScript{
				scripted: scripted{reserves: []func() (reservation.ReserveResult, error){reservedUntil(expires, false, acked...)}},
				gets:     []func() (reservation.Hold, error){holdOK(expires.Add(3*time.Millisecond), acked...)},
			},
			ops:  []string{"reserve", "get"},
			want: []string{"must answer the acknowledged hold"},
			held: 1,
		},
		{
			name: "the hold read after an acknowledged claim",
			s: &readScript{
				scripted: scripted{
					reserves: []func() (reservation.ReserveResult, error){reservedUntil(expires, false, acked...)},
					claims:   []func() (reservation.ClaimResult, error){claimOK(acked...)},
				},
				gets: []func() (reservation.Hold, error){holdOK(expires, acked...)},
			},
			ops:     []string{"reserve", "claim", "get"},
			want:    []string{"it was sent after the claim was acknowledged"},
			claimed: 1, claims: 1,
		},
		{
			name: "a claim that deducts other allocations",
			s: &readScript{
				scripted: scripted{
					reserves: []func() (reservation.ReserveResult, error){reservedUntil(expires, false, acked...)},
					claims:   []func() (reservation.ClaimResult, error){claimOK(shadow...)},
				},
			},
			ops:    []string{"reserve", "claim"},
			want:   []string{"a claim deducts exactly the acknowledged allocations"},
			claims: 1,
		},
		{
			name: "not found after a release was sent",
			s: &readScript{
				scripted: scripted{
					reserves: []func() (reservation.ReserveResult, error){reservedUntil(expires, false, acked...)},
					releases: []func() (reservation.ReleaseResult, error){releaseOK(acked...)},
				},
				gets: []func() (reservation.Hold, error){
					getErr(fmt.Errorf("get: %w", reservation.ErrReleased)),
					getErr(fmt.Errorf("get: %w", reservation.ErrNotFound)),
				},
			},
			ops:  []string{"reserve", "release", "get", "get"},
			want: []string{"never not_found"},
		},
		{
			name: "near its expiry a hold may be gone, but not unknown",
			s: &readScript{
				scripted: scripted{reserves: []func() (reservation.ReserveResult, error){
					reservedUntil(time.Now().Add(DefaultReadsMargin/2), false, acked...)}},
				gets: []func() (reservation.Hold, error){
					getErr(fmt.Errorf("get: %w", reservation.ErrExpired)),
					getErr(fmt.Errorf("get: %w", reservation.ErrNotFound)),
				},
			},
			ops:  []string{"reserve", "get", "get"},
			want: []string{"never not_found"},
		},
		{
			name: "calls without an answer are not judged, a later answer is",
			s: &readScript{
				scripted: scripted{
					// The reserve's outcome is unknown until its replay.
					reserves: []func() (reservation.ReserveResult, error){reserveErr(errLost), reservedUntil(expires, true, acked...)},
					// The claim's outcome is unknown until its retry.
					claims: []func() (reservation.ClaimResult, error){claimErr(errLost), claimOK(acked...)},
				},
				gets: []func() (reservation.Hold, error){
					getErr(fmt.Errorf("get: %w", reservation.ErrNotFound)), // before any acknowledgement
					getErr(errLost),
					holdOK(expires, acked...),
					holdOK(expires, acked...), // a claim was sent: either answer
					getErr(fmt.Errorf("get: %w", reservation.ErrAlreadyClaimed)),
					holdOK(expires, acked...),
				},
			},
			ops:  []string{"reserve", "get", "reserve", "get", "get", "claim", "get", "claim", "get", "get"},
			want: []string{"it was sent after the claim was acknowledged"},
			held: 1, claimed: 2, claims: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := readSteps(t, tc.s, tc.ops...)
			t.Logf("%s", res)
			for _, v := range res.Violations {
				t.Logf("%s", v)
			}
			if len(res.Violations) != len(tc.want) {
				t.Fatalf("%d violation(s), want %d: %q", len(res.Violations), len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(res.Violations[i], w) || !strings.Contains(res.Violations[i], "shop 1 token t") {
					t.Errorf("violation %d: %s\nwant it to name the token and say %q", i, res.Violations[i], w)
				}
			}
			if res.Held != tc.held || res.Claimed != tc.claimed || res.Claims != tc.claims {
				t.Errorf("judged %d GETs held, %d claimed, %d claims; want %d, %d, %d", res.Held, res.Claimed, res.Claims, tc.held, tc.claimed, tc.claims)
			}
			if h, ok := res.Acked[TokenKey{1, "t"}]; !ok || !SameAllocations(h.Allocations, acked) || h.ExpiresAt.IsZero() {
				t.Errorf("acknowledged hold %+v (found %v), want %v with its expiry", h, ok, acked)
			}
		})
	}
}
