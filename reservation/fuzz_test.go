package reservation_test

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// The fuzz targets feed validation arbitrary input and hold it to two
// rules: it never panics, and it accepts exactly what the documented bounds
// allow (each target carries its own statement of the bounds, written from
// the field docs, not from validate.go). A refusal must be a
// *ValidationError naming a field and matching ErrInvalidInput.
//
// The seed corpus lives in testdata/fuzz/<target>; `go test` runs it. A
// short fuzz run:
//
//	go test -run='^$' -fuzz='^FuzzValidateReserve$' -fuzztime=10s ./reservation/

// ints decodes a fuzzer's bytes as a stream of int64s, so one []byte can
// stand for a variable number of lines, locations and allocations.
type ints struct{ b []byte }

func (r *ints) next() int64 {
	if len(r.b) == 0 {
		return 0
	}
	if len(r.b) < 8 {
		// A short tail is a small number: the interesting values (0,
		// 1, negatives, the bounds) are reachable from few bytes.
		v := int64(int8(r.b[0]))
		r.b = r.b[1:]
		return v
	}
	v := int64(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

// small bounds a count read from the stream to [0, limit], so a hostile
// count cannot make the test allocate gigabytes.
func small(v int64, limit int) int {
	if v < 0 {
		v = -v
	}
	return int(v % int64(limit+1))
}

// limitsFrom builds limits from fuzzed values; zero values take defaults,
// and limits that Validate refuses are replaced by the defaults (a store
// never runs with them).
func limitsFrom(maxQty int64, maxLines, maxLocs int16, minTTL, maxTTL int64) reservation.Limits {
	l := reservation.Limits{MaxQuantity: maxQty, MaxLines: int(maxLines), MaxLocations: int(maxLocs),
		MinTTL: time.Duration(minTTL), MaxTTL: time.Duration(maxTTL)}.WithDefaults()
	if l.Validate() != nil {
		return reservation.DefaultLimits
	}
	return l
}

func checkRefusal(t *testing.T, err error) {
	t.Helper()
	var ve *reservation.ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, reservation.ErrInvalidInput) || ve.Field == "" || ve.Reason == "" {
		t.Fatalf("refusal %v (%T): want a *ValidationError naming a field and matching ErrInvalidInput", err, err)
	}
	if !strings.Contains(err.Error(), ve.Field) {
		t.Fatalf("refusal %q does not name its field %q", err, ve.Field)
	}
}

// validToken is the documented token rule: 1..64 bytes of printable ASCII
// without spaces.
func validToken(token string) bool {
	if len(token) < 1 || len(token) > reservation.MaxTokenBytes {
		return false
	}
	for _, c := range []byte(token) {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// reserveOK states ReserveParams' documented bounds.
func reserveOK(l reservation.Limits, p *reservation.ReserveParams) bool {
	if p.Shop <= 0 || !validToken(p.Token) || p.TTL < l.MinTTL || p.TTL > l.MaxTTL {
		return false
	}
	if p.Authority != "" && p.Authority != reservation.AuthorityRedis && p.Authority != reservation.AuthorityMySQL {
		return false
	}
	if len(p.Lines) < 1 || len(p.Lines) > l.MaxLines {
		return false
	}
	items := map[int64]bool{}
	for _, ln := range p.Lines {
		if ln.Item <= 0 || items[ln.Item] || ln.Quantity < 1 || ln.Quantity > l.MaxQuantity {
			return false
		}
		items[ln.Item] = true
		if len(ln.Locations) < 1 || len(ln.Locations) > l.MaxLocations {
			return false
		}
		locs := map[int64]bool{}
		for _, loc := range ln.Locations {
			if loc <= 0 || locs[loc] {
				return false
			}
			locs[loc] = true
		}
	}
	return true
}

func FuzzValidateReserve(f *testing.F) {
	// Seeds: a valid cart, and carts at and past each bound.
	cart := func(vals ...int64) []byte {
		b := make([]byte, 0, 8*len(vals))
		for _, v := range vals {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
		return b
	}
	// lines: count, then per line item, quantity, location count, locations.
	f.Add(int64(1), "cart-1", int64(time.Minute), "", cart(1, 7, 2, 2, 3, 4), int64(0), int16(0), int16(0), int64(0), int64(0))
	f.Add(int64(1), "cart-1", int64(time.Second), "mysql", cart(2, 7, 1000, 1, 1, 8, 1, 1, 1), int64(0), int16(0), int16(0), int64(0), int64(0))
	f.Add(int64(0), "", int64(0), "postgres", cart(0), int64(0), int16(0), int16(0), int64(0), int64(0))
	f.Add(int64(9), "tok en", int64(time.Hour+1), "redis", cart(1, 7, 1001, 1, 1), int64(0), int16(0), int16(0), int64(0), int64(0))
	f.Add(int64(9), strings.Repeat("x", 65), int64(time.Hour), "", cart(2, 5, 1, 1, 1, 5, 1, 1, 1), int64(0), int16(0), int16(0), int64(0), int64(0))
	f.Add(int64(-1), "\x7f", int64(-1), "redis", cart(1, -5, -1, 2, 3, 3), int64(5), int16(1), int16(1), int64(time.Millisecond), int64(time.Millisecond))
	f.Fuzz(func(t *testing.T, shop int64, token string, ttl int64, authority string, raw []byte,
		maxQty int64, maxLines, maxLocs int16, minTTL, maxTTL int64) {
		l := limitsFrom(maxQty, maxLines, maxLocs, minTTL, maxTTL)
		in := &ints{raw}
		p := &reservation.ReserveParams{Shop: shop, Token: token, TTL: time.Duration(ttl), Authority: reservation.Authority(authority)}
		// Up to a few lines more than allowed, so "too many lines" is
		// reachable, and no more, so the test stays fast.
		for range small(in.next(), min(l.MaxLines+2, 300)) {
			ln := reservation.Line{Item: in.next(), Quantity: in.next()}
			for range small(in.next(), min(l.MaxLocations+2, 60)) {
				ln.Locations = append(ln.Locations, in.next())
			}
			p.Lines = append(p.Lines, ln)
		}
		err := l.ValidateReserve(p)
		want := reserveOK(l, p)
		switch {
		case err == nil && !want:
			t.Fatalf("accepted %+v under %+v: outside the documented bounds", p, l)
		case err != nil && want:
			t.Fatalf("refused %+v under %+v: %v", p, l, err)
		case err != nil:
			checkRefusal(t, err)
		}
	})
}

// allocationsOK states the documented bounds of a claim's Deducted and a
// deduction's Allocations.
func allocationsOK(l reservation.Limits, as []reservation.Allocation, emptyOK bool) bool {
	if len(as) == 0 {
		return emptyOK
	}
	if len(as) > l.MaxLines {
		return false
	}
	type il struct{ item, loc int64 }
	seen := map[il]bool{}
	for _, a := range as {
		if a.Item <= 0 || a.Location <= 0 || a.Quantity < 1 || a.Quantity > l.MaxQuantity || seen[il{a.Item, a.Location}] {
			return false
		}
		seen[il{a.Item, a.Location}] = true
	}
	return true
}

func readAllocations(in *ints, limit int) []reservation.Allocation {
	var as []reservation.Allocation
	for range small(in.next(), limit) {
		as = append(as, reservation.Allocation{Item: in.next(), Location: in.next(), Quantity: in.next()})
	}
	return as
}

func FuzzValidateClaim(f *testing.F) {
	f.Add(int64(1), "cart-1", 0, []byte{})
	f.Add(int64(1), "cart-1", 1, []byte{2, 1, 1, 3, 1, 1, 3})
	f.Add(int64(1), "cart-1", 1, []byte{1, 0, 1, 1})
	f.Add(int64(0), "", 2, []byte{})
	f.Add(int64(3), "t", -1, []byte{1, 1, 1, 0})
	f.Fuzz(func(t *testing.T, shop int64, token string, as int, raw []byte) {
		l := reservation.DefaultLimits
		p := &reservation.ClaimParams{Shop: shop, Token: token, As: reservation.Role(as), Deducted: readAllocations(&ints{raw}, l.MaxLines+2)}
		err := l.ValidateClaim(p)
		want := shop > 0 && validToken(token) && (p.As == reservation.AsAuthority ||
			p.As == reservation.AsShadow && allocationsOK(l, p.Deducted, true))
		switch {
		case err == nil && !want:
			t.Fatalf("accepted %+v: outside the documented bounds", p)
		case err != nil && want:
			t.Fatalf("refused %+v: %v", p, err)
		case err != nil:
			checkRefusal(t, err)
		}
	})
}

func FuzzValidateDeduct(f *testing.F) {
	f.Add(int64(1), "cart-1", []byte{1, 1, 1, 2})
	f.Add(int64(1), "cart-1", []byte{})
	f.Add(int64(1), "cart-1", []byte{2, 1, 1, 2, 1, 1, 2})
	f.Add(int64(1), "c", []byte{1, 1, 1, 0x7f})
	f.Fuzz(func(t *testing.T, shop int64, token string, raw []byte) {
		l := reservation.DefaultLimits
		p := &reservation.DeductParams{Shop: shop, Token: token, Allocations: readAllocations(&ints{raw}, l.MaxLines+2)}
		err := l.ValidateDeduct(p)
		want := shop > 0 && validToken(token) && allocationsOK(l, p.Allocations, false)
		switch {
		case err == nil && !want:
			t.Fatalf("accepted %+v: outside the documented bounds", p)
		case err != nil && want:
			t.Fatalf("refused %+v: %v", p, err)
		case err != nil:
			checkRefusal(t, err)
		}
	})
}

func FuzzValidateAdjust(f *testing.F) {
	f.Add(int64(1), int64(1), int64(1), true, int64(5), int64(0), 0)
	f.Add(int64(1), int64(1), int64(1), false, int64(0), int64(-3), 0)
	f.Add(int64(1), int64(1), int64(1), false, int64(0), int64(2), 1)
	f.Add(int64(1), int64(1), int64(1), true, int64(5), int64(0), 1)
	f.Add(int64(1), int64(1), int64(1), true, int64(-1), int64(0), 0)
	f.Add(int64(1), int64(1), int64(1), false, int64(0), int64(0), 0)
	f.Add(int64(1), int64(1), int64(1), false, int64(0), int64(-1_000_000_001), 0)
	f.Add(int64(1), int64(1), int64(1), false, int64(0), int64(-9223372036854775808), 0)
	f.Fuzz(func(t *testing.T, shop, item, loc int64, hasAvailable bool, available, delta int64, as int) {
		l := reservation.DefaultLimits
		p := &reservation.AdjustParams{Shop: shop, Item: item, Location: loc, Delta: delta, As: reservation.Role(as)}
		if hasAvailable {
			p.Available = &available
		}
		err := l.ValidateAdjust(p)
		// Exactly one of Available (0..MaxStock, authority only) and a
		// non-zero Delta (within ±MaxStock).
		want := shop > 0 && item > 0 && loc > 0 && (p.As == reservation.AsAuthority || p.As == reservation.AsShadow)
		if hasAvailable {
			want = want && delta == 0 && p.As == reservation.AsAuthority && available >= 0 && available <= l.MaxStock
		} else {
			want = want && delta != 0 && delta >= -l.MaxStock && delta <= l.MaxStock
		}
		switch {
		case err == nil && !want:
			t.Fatalf("accepted %+v (available %v): outside the documented bounds", p, available)
		case err != nil && want:
			t.Fatalf("refused %+v: %v", p, err)
		case err != nil:
			checkRefusal(t, err)
		}
	})
}

// The remaining validators take ids and a token; one target covers them.
func FuzzValidateIDs(f *testing.F) {
	f.Add(int64(1), int64(1), "cart-1", 0)
	f.Add(int64(0), int64(-1), "", -1)
	f.Add(int64(1), int64(1), "\x00", 100001)
	f.Add(int64(-9223372036854775808), int64(9223372036854775807), "~~~~", 100000)
	f.Fuzz(func(t *testing.T, shop, item int64, token string, limit int) {
		l := reservation.DefaultLimits
		check := func(name string, err error, want bool) {
			t.Helper()
			switch {
			case err == nil && !want:
				t.Fatalf("%s accepted shop %d item %d token %q limit %d", name, shop, item, token, limit)
			case err != nil && want:
				t.Fatalf("%s refused shop %d item %d token %q limit %d: %v", name, shop, item, token, limit, err)
			case err != nil:
				checkRefusal(t, err)
			}
		}
		check("ValidateRelease", l.ValidateRelease(&reservation.ReleaseParams{Shop: shop, Token: token}), shop > 0 && validToken(token))
		check("ValidateGet", l.ValidateGet(&reservation.GetParams{Shop: shop, Token: token}), shop > 0 && validToken(token))
		check("ValidateAvailability", l.ValidateAvailability(&reservation.AvailabilityParams{Shop: shop, Item: item}), shop > 0 && item > 0)
		check("ValidateReap", l.ValidateReap(&reservation.ReapParams{Limit: limit}), limit >= 0 && limit <= 100000)
	})
}

// Nil parameters are refused, not dereferenced.
func TestValidateNil(t *testing.T) {
	l := reservation.DefaultLimits
	for name, err := range map[string]error{
		"reserve": l.ValidateReserve(nil), "claim": l.ValidateClaim(nil), "release": l.ValidateRelease(nil),
		"get": l.ValidateGet(nil), "adjust": l.ValidateAdjust(nil), "availability": l.ValidateAvailability(nil),
		"deduct": l.ValidateDeduct(nil), "reap": l.ValidateReap(nil),
	} {
		checkRefusal(t, err)
		if !strings.Contains(err.Error(), "params") {
			t.Errorf("%s(nil): %v", name, err)
		}
	}
}
