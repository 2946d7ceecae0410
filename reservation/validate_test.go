package reservation_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

func TestValidateReserve(t *testing.T) {
	l := reservation.DefaultLimits
	ok := func() reservation.ReserveParams {
		return reservation.ReserveParams{Shop: 1, Token: "cart-1", TTL: time.Minute,
			Lines: []reservation.Line{{Item: 1, Quantity: 2, Locations: []int64{3, 4}}}}
	}
	if err := l.ValidateReserve(&[]reservation.ReserveParams{ok()}[0]); err != nil {
		t.Fatalf("valid params: %v", err)
	}
	withLabel := ok()
	withLabel.Compare = strings.Repeat("m", reservation.MaxCompareLabel)
	if err := l.ValidateReserve(&withLabel); err != nil {
		t.Fatalf("a compare label of the longest length: %v", err)
	}
	cases := []struct {
		field string
		mut   func(p *reservation.ReserveParams)
	}{
		{"shop", func(p *reservation.ReserveParams) { p.Shop = 0 }},
		{"token", func(p *reservation.ReserveParams) { p.Token = "" }},
		{"token", func(p *reservation.ReserveParams) { p.Token = strings.Repeat("a", 65) }},
		{"token", func(p *reservation.ReserveParams) { p.Token = "has space" }},
		{"ttl", func(p *reservation.ReserveParams) { p.TTL = time.Millisecond }},
		{"ttl", func(p *reservation.ReserveParams) { p.TTL = 2 * time.Hour }},
		{"authority", func(p *reservation.ReserveParams) { p.Authority = "postgres" }},
		{"compare", func(p *reservation.ReserveParams) { p.Compare = strings.Repeat("m", reservation.MaxCompareLabel+1) }},
		{"lines", func(p *reservation.ReserveParams) { p.Lines = nil }},
		{"lines", func(p *reservation.ReserveParams) { p.Lines = make([]reservation.Line, l.MaxLines+1) }},
		{"lines[0].item", func(p *reservation.ReserveParams) { p.Lines[0].Item = -1 }},
		{"lines[0].quantity", func(p *reservation.ReserveParams) { p.Lines[0].Quantity = 0 }},
		{"lines[0].quantity", func(p *reservation.ReserveParams) { p.Lines[0].Quantity = l.MaxQuantity + 1 }},
		{"lines[0].locations", func(p *reservation.ReserveParams) { p.Lines[0].Locations = nil }},
		{"lines[0].locations[1]", func(p *reservation.ReserveParams) { p.Lines[0].Locations = []int64{3, 3} }},
		{"lines[0].locations[0]", func(p *reservation.ReserveParams) { p.Lines[0].Locations = []int64{0} }},
		{"lines[1].item", func(p *reservation.ReserveParams) { p.Lines = append(p.Lines, p.Lines[0]) }},
	}
	for _, tc := range cases {
		p := ok()
		tc.mut(&p)
		err := l.ValidateReserve(&p)
		var ve *reservation.ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, reservation.ErrInvalidInput) {
			t.Errorf("%s: got %v, want a ValidationError", tc.field, err)
			continue
		}
		if ve.Field != tc.field {
			t.Errorf("error names %q, want %q: %v", ve.Field, tc.field, err)
		}
	}
}

func TestValidateAdjust(t *testing.T) {
	l := reservation.DefaultLimits
	five, neg := int64(5), int64(-1)
	good := []reservation.AdjustParams{
		{Shop: 1, Item: 1, Location: 1, Available: &five},
		{Shop: 1, Item: 1, Location: 1, Delta: -3},
		{Shop: 1, Item: 1, Location: 1, Delta: 2, As: reservation.AsShadow},
	}
	for _, p := range good {
		if err := l.ValidateAdjust(&p); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	bad := map[string]reservation.AdjustParams{
		"available": {Shop: 1, Item: 1, Location: 1, Available: &neg},
		"delta":     {Shop: 1, Item: 1, Location: 1},
		"location":  {Shop: 1, Item: 1, Delta: 1},
		"item":      {Shop: 1, Location: 1, Delta: 1},
	}
	for field, p := range bad {
		var ve *reservation.ValidationError
		if err := l.ValidateAdjust(&p); !errors.As(err, &ve) || ve.Field != field {
			t.Errorf("want error on %s, got %v", field, err)
		}
	}
	shadowSet := reservation.AdjustParams{Shop: 1, Item: 1, Location: 1, Available: &five, As: reservation.AsShadow}
	if err := l.ValidateAdjust(&shadowSet); err == nil {
		t.Error("a shadow adjust with available must be refused: the shadow follows a delta")
	}
}

func TestLimitsValidate(t *testing.T) {
	if err := reservation.DefaultLimits.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := reservation.DefaultLimits
	bad.MaxTTL = bad.MinTTL / 2
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "MaxTTL") {
		t.Errorf("MaxTTL below MinTTL: %v", err)
	}
}

func TestSameLines(t *testing.T) {
	lines := []reservation.Line{{Item: 1, Quantity: 2, Locations: []int64{1}}, {Item: 2, Quantity: 1, Locations: []int64{1}}}
	held := []reservation.Allocation{{Item: 2, Location: 9, Quantity: 1}, {Item: 1, Location: 1, Quantity: 2}}
	if !reservation.SameLines(lines, held) {
		t.Error("same items and quantities at other locations are the same cart")
	}
	held[0].Quantity = 2
	if reservation.SameLines(lines, held) {
		t.Error("a different quantity is a different cart")
	}
	if reservation.SameLines(lines, held[:1]) {
		t.Error("a missing item is a different cart")
	}
}

// The change feed keeps a compared cart as text (EncodeCart); the relay
// reads it back for Redis to evaluate: every line, in the caller's order,
// with its locations in preference order.
func TestCartRoundTrip(t *testing.T) {
	cart := []reservation.Line{
		{Item: 9, Quantity: 2, Locations: []int64{5, 3, 7}},
		{Item: 1, Quantity: 1000, Locations: []int64{1}},
	}
	s := reservation.EncodeCart(cart)
	if s != "9:2:5|3|7,1:1000:1" {
		t.Fatalf("EncodeCart = %q", s)
	}
	back, err := reservation.DecodeCart(s)
	if err != nil || !reflect.DeepEqual(back, cart) {
		t.Fatalf("DecodeCart(%q) = %v, %v; want %v", s, back, err, cart)
	}
	if back, err := reservation.DecodeCart(""); err != nil || back != nil {
		t.Errorf("DecodeCart(\"\") = %v, %v; want no cart", back, err)
	}
	for _, bad := range []string{"1:2", "1:2:", "x:2:3", "1:2:3|y", "1:2:3,"} {
		if _, err := reservation.DecodeCart(bad); err == nil {
			t.Errorf("DecodeCart(%q) accepted", bad)
		}
	}
}
