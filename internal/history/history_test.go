package history

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/seed31b0e981/reservoir/reservation"
)

// scripted is a Reservations that gives the answers it is told, in order,
// so a test can record exactly the history it means.
type scripted struct {
	reserves []func() (reservation.ReserveResult, error)
	claims   []func() (reservation.ClaimResult, error)
	releases []func() (reservation.ReleaseResult, error)
}

func (s *scripted) Reserve(context.Context, *reservation.ReserveParams) (reservation.ReserveResult, error) {
	next := s.reserves[0]
	s.reserves = s.reserves[1:]
	return next()
}

func (s *scripted) Claim(context.Context, *reservation.ClaimParams) (reservation.ClaimResult, error) {
	next := s.claims[0]
	s.claims = s.claims[1:]
	return next()
}

func (s *scripted) Release(context.Context, *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	next := s.releases[0]
	s.releases = s.releases[1:]
	return next()
}

func reserveOK(allocs ...reservation.Allocation) func() (reservation.ReserveResult, error) {
	return func() (reservation.ReserveResult, error) {
		return reservation.ReserveResult{Status: reservation.StatusReserved, Allocations: allocs}, nil
	}
}

func reserveShort(replayed bool, short ...reservation.ShortLine) func() (reservation.ReserveResult, error) {
	return func() (reservation.ReserveResult, error) {
		return reservation.ReserveResult{Status: reservation.StatusInsufficient, Short: short, Replayed: replayed}, nil
	}
}

func releaseOK(allocs ...reservation.Allocation) func() (reservation.ReleaseResult, error) {
	return func() (reservation.ReleaseResult, error) {
		return reservation.ReleaseResult{Released: true, Allocations: allocs}, nil
	}
}

func claimErr(err error) func() (reservation.ClaimResult, error) {
	return func() (reservation.ClaimResult, error) { return reservation.ClaimResult{}, err }
}

func releaseErr(err error) func() (reservation.ReleaseResult, error) {
	return func() (reservation.ReleaseResult, error) { return reservation.ReleaseResult{}, err }
}

// tombstoneCart records, for a two-item cart "r" (item 1 short, item 2 not):
// "x" holds item 1's only unit, r is refused, x is released, and r is
// reserved again with the answer again.
func tombstoneCart(t *testing.T, again func() (reservation.ReserveResult, error)) []Entry {
	t.Helper()
	ctx := context.Background()
	rec := New()
	rec.Stock(Key{Shop: 1, Item: 1, Location: 1}, 1)
	rec.Stock(Key{Shop: 1, Item: 2, Location: 1}, 5)
	s := &scripted{
		reserves: []func() (reservation.ReserveResult, error){
			reserveOK(reservation.Allocation{Item: 1, Location: 1, Quantity: 1}),
			reserveShort(false, reservation.ShortLine{Item: 1}),
			again,
		},
		releases: []func() (reservation.ReleaseResult, error){
			releaseOK(reservation.Allocation{Item: 1, Location: 1, Quantity: 1}),
		},
	}
	c := rec.Client(s)
	x := &reservation.ReserveParams{Shop: 1, Token: "x", Lines: []reservation.Line{{Item: 1, Quantity: 1, Locations: []int64{1}}}}
	r := &reservation.ReserveParams{Shop: 1, Token: "r", Lines: []reservation.Line{
		{Item: 1, Quantity: 1, Locations: []int64{1}},
		{Item: 2, Quantity: 1, Locations: []int64{1}},
	}}
	for _, call := range []func() error{
		func() error { _, err := c.Reserve(ctx, x); return err },
		func() error { _, err := c.Reserve(ctx, r); return err },
		func() error { _, err := c.Release(ctx, &reservation.ReleaseParams{Shop: 1, Token: "x"}); return err },
		func() error { _, err := c.Reserve(ctx, r); return err },
	} {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	return rec.Entries()
}

// An insufficient cart is recorded on every line, short or not, so its
// refusal reaches every item: a hold placed for the token later is caught
// on each of them.
func TestRecorderRefusesEveryLine(t *testing.T) {
	entries := tombstoneCart(t, reserveShort(true, reservation.ShortLine{Item: 1}))
	var refusals []Output
	for _, e := range entries {
		if e.Input.Token == "r" && e.Input.Op == OpReserve && e.Input.Part.Item == 2 {
			refusals = append(refusals, e.Output)
		}
	}
	if len(refusals) != 2 || refusals[0].Result != ResultInsufficient || refusals[0].Short || !refusals[1].Replayed {
		t.Fatalf("item 2's line of the refused cart recorded as %+v, want insufficient (not short), then replayed", refusals)
	}
	if res, err := Check(entries, CheckOptions{Dir: t.TempDir()}); err != nil || res.Outcome != porcupine.Ok {
		t.Errorf("refusal replayed: %s %v, want Ok", res, err)
	}

	entries = tombstoneCart(t, reserveOK(
		reservation.Allocation{Item: 1, Location: 1, Quantity: 1},
		reservation.Allocation{Item: 2, Location: 1, Quantity: 1}))
	res, err := Check(entries, CheckOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if want := []Part{{1, 1}, {1, 2}}; res.Outcome != porcupine.Illegal || !slices.Equal(res.Failed, want) {
		t.Errorf("refused cart reserved later: %s, want Illegal on %v", res, want)
	}
}

// The answer "released" is recorded by its name, with the error's text:
// the model takes it from a claim of a released token, and never from a
// release, where the same name without an error is a release that
// released.
func TestRecorderReleasedAnswer(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		claim     error
		release   error
		wantClaim string
		want      porcupine.CheckResult
	}{
		{"claim answers released", fmt.Errorf("store: %w", reservation.ErrReleased), nil, "released", porcupine.Ok},
		{"claim answers not found", reservation.ErrNotFound, nil, "not_found", porcupine.Illegal},
		{"second release answers the released error", reservation.ErrReleased, reservation.ErrReleased, "released", porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := New()
			rec.Stock(Key{Shop: 1, Item: 1, Location: 1}, 1)
			a := reservation.Allocation{Item: 1, Location: 1, Quantity: 1}
			s := &scripted{
				reserves: []func() (reservation.ReserveResult, error){reserveOK(a)},
				claims:   []func() (reservation.ClaimResult, error){claimErr(tc.claim)},
				releases: []func() (reservation.ReleaseResult, error){releaseOK(a)},
			}
			if tc.release != nil {
				s.releases = append(s.releases, releaseErr(tc.release))
			}
			c := rec.Client(s)
			if _, err := c.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: "a", Lines: []reservation.Line{{Item: 1, Quantity: 1, Locations: []int64{1}}}}); err != nil {
				t.Fatal(err)
			}
			_, _ = c.Release(ctx, &reservation.ReleaseParams{Shop: 1, Token: "a"})
			_, _ = c.Claim(ctx, &reservation.ClaimParams{Shop: 1, Token: "a"})
			if tc.release != nil {
				_, _ = c.Release(ctx, &reservation.ReleaseParams{Shop: 1, Token: "a"})
			}
			entries := rec.Entries()
			for _, e := range entries {
				if e.Input.Op == OpClaim && (e.Output.Result != tc.wantClaim || e.Output.Err == "" || e.Output.Unknown) {
					t.Errorf("claim recorded as %+v, want the answer %q with its error", e.Output, tc.wantClaim)
				}
			}
			res, err := Check(entries, CheckOptions{Dir: t.TempDir()})
			if err != nil || res.Outcome != tc.want {
				t.Errorf("%s %v, want %s", res, err, tc.want)
			}
		})
	}
}

// tokenHash must hash every field of tokenState: porcupine's cache would
// take two states that differ only in an unhashed field for one.
func TestTokenHashCoversEveryField(t *testing.T) {
	if n := reflect.TypeFor[tokenState]().NumField(); n != 4 {
		t.Fatalf("tokenState has %d fields: hash the new ones in tokenHash, then update this test", n)
	}
	base := tokenState{status: held, loc: 1, qty: 2, deadline: 3}
	for _, other := range []tokenState{
		{status: expiring, loc: 1, qty: 2, deadline: 3},
		{status: held, loc: 9, qty: 2, deadline: 3},
		{status: held, loc: 1, qty: 9, deadline: 3},
		{status: held, loc: 1, qty: 2, deadline: 9},
	} {
		if tokenHash("a", base) == tokenHash("a", other) {
			t.Errorf("%+v and %+v hash alike", base, other)
		}
	}
	if tokenHash("a", base) == tokenHash("b", base) {
		t.Error("the token is not hashed")
	}
}
