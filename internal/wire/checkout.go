package wire

import (
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// The checkout API's bodies (/v1): what a checkout or inventory client
// sends and is answered.

// ReserveRequest is the body of POST /v1/shops/{shop}/reservations.
type ReserveRequest struct {
	// Token is the checkout token: the idempotency key (1 to 64 printable
	// ASCII bytes). Required.
	Token string `json:"token"`
	// Lines are the cart's items (1 to 100, no item twice). Required.
	Lines []Line `json:"lines"`
	// TTLMs is the hold's lifetime in milliseconds (1 s to 1 h); 0 or
	// absent: the server's default (10 min).
	TTLMs int64 `json:"ttl_ms"`
}

// Line is one item of a cart.
type Line struct {
	// Item is the inventory item id (positive).
	Item int64 `json:"item"`
	// Quantity is how many units to hold (1 to the pod's cap).
	Quantity int64 `json:"quantity"`
	// Locations are the locations allowed to serve the line, most
	// preferred first (1 to 50, each positive, no repeats).
	Locations []int64 `json:"locations"`
}

// ReservationLines is ls as the stores take them.
func ReservationLines(ls []Line) []reservation.Line {
	if ls == nil {
		return nil
	}
	out := make([]reservation.Line, len(ls))
	for i, l := range ls {
		out[i] = reservation.Line{Item: l.Item, Quantity: l.Quantity, Locations: l.Locations}
	}
	return out
}

// Reservation is the answer about one reservation (reserve, get).
type Reservation struct {
	// Shop is the reservation's shop.
	Shop int64 `json:"shop"`
	// Token is the reservation's token.
	Token string `json:"token"`
	// Pod is the pod that serves the shop.
	Pod string `json:"pod"`
	// Status is "reserved" (reserve) or "held" (get).
	Status string `json:"status"`
	// Authority is the store that decided the hold ("redis" or "mysql":
	// the shop's decider when it was placed).
	Authority string `json:"authority,omitempty"`
	// Allocations say which location serves how many units of each item.
	Allocations []Allocation `json:"allocations,omitempty"`
	// ExpiresAt is the hold's expiry on the store's clock.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Replayed is true when a repeated reserve returned the token's first
	// answer instead of deciding again; left out otherwise.
	Replayed bool `json:"replayed,omitempty"`
}

// Allocation is the units of one item a location serves (holds, or
// deducted).
type Allocation struct {
	// Item is the item id.
	Item int64 `json:"item"`
	// Location is the location id.
	Location int64 `json:"location"`
	// Quantity is the units.
	Quantity int64 `json:"quantity"`
}

// AllocationsOf is as as the wire shows them ([] for none).
func AllocationsOf(as []reservation.Allocation) []Allocation {
	out := make([]Allocation, 0, len(as))
	for _, a := range as {
		out = append(out, Allocation{Item: a.Item, Location: a.Location, Quantity: a.Quantity})
	}
	return out
}

// ShortLine is a line of a reserve that could not be served.
type ShortLine struct {
	// Item is the line's item.
	Item int64 `json:"item"`
	// Requested is the line's quantity.
	Requested int64 `json:"requested"`
	// Unheld is the most any single eligible location could have served
	// at the time of the answer.
	Unheld int64 `json:"unheld"`
}

// ShortLinesOf is ss as the wire shows them ([] for none).
func ShortLinesOf(ss []reservation.ShortLine) []ShortLine {
	out := make([]ShortLine, 0, len(ss))
	for _, s := range ss {
		out = append(out, ShortLine{Item: s.Item, Requested: s.Requested, Unheld: s.Unheld})
	}
	return out
}

// ClaimResponse is the answer of POST .../reservations/{token}/claim.
type ClaimResponse struct {
	// Shop is the reservation's shop.
	Shop int64 `json:"shop"`
	// Token is the reservation's token.
	Token string `json:"token"`
	// Pod is the pod that serves the shop.
	Pod string `json:"pod"`
	// Outcome is "claimed": the ledger was deducted (now, or before when
	// Replayed).
	Outcome string `json:"outcome"`
	// Allocations are what the ledger was deducted by.
	Allocations []Allocation `json:"allocations"`
	// Replayed is true when the token had been claimed before: nothing
	// changed this time. Left out otherwise.
	Replayed bool `json:"replayed,omitempty"`
}

// ReleaseResponse is the answer of POST .../reservations/{token}/release.
type ReleaseResponse struct {
	// Shop is the reservation's shop.
	Shop int64 `json:"shop"`
	// Token is the reservation's token.
	Token string `json:"token"`
	// Pod is the pod that serves the shop.
	Pod string `json:"pod"`
	// Released is false when there was nothing to release (released
	// before, expired, refused or never reserved): release is idempotent.
	Released bool `json:"released"`
	// Allocations are the units given back; left out when none.
	Allocations []Allocation `json:"allocations,omitempty"`
}

// AvailabilityResponse is the answer of GET
// /v1/shops/{shop}/items/{item}/availability.
type AvailabilityResponse struct {
	// Shop is the shop asked about.
	Shop int64 `json:"shop"`
	// Pod is the pod that serves it.
	Pod string `json:"pod"`
	// Item is the item asked about.
	Item int64 `json:"item"`
	// Locations are the item's known locations, by id.
	Locations []LocationAvailability `json:"locations"`
}

// LocationAvailability is what a buyer could reserve at one location now.
type LocationAvailability struct {
	// Location is the location id.
	Location int64 `json:"location"`
	// Unheld is the stock not held by any reservation (never negative).
	Unheld int64 `json:"unheld"`
}

// AvailabilityOf is the answer for shop's item at pod, from res.
func AvailabilityOf(shop int64, pod string, res reservation.AvailabilityResult) AvailabilityResponse {
	v := AvailabilityResponse{Shop: shop, Pod: pod, Item: res.Item, Locations: make([]LocationAvailability, 0, len(res.Locations))}
	for _, l := range res.Locations {
		v.Locations = append(v.Locations, LocationAvailability{Location: l.Location, Unheld: l.Unheld})
	}
	return v
}

// AdjustRequest is the body of POST
// /v1/shops/{shop}/items/{item}/locations/{location}/adjust: exactly one
// of Available and Delta.
type AdjustRequest struct {
	// Available sets the sellable quantity (0 or more).
	Available *int64 `json:"available"`
	// Delta moves it (not 0).
	Delta *int64 `json:"delta"`
}

// AdjustResponse is the answer of an adjust.
type AdjustResponse struct {
	// Shop is the shop whose stock changed.
	Shop int64 `json:"shop"`
	// Item is the item whose stock changed.
	Item int64 `json:"item"`
	// Location is the location whose stock changed.
	Location int64 `json:"location"`
	// Pod is the pod that serves the shop.
	Pod string `json:"pod"`
	// Available is the ledger's sellable quantity after the change.
	Available int64 `json:"available"`
	// Delta is the change applied.
	Delta int64 `json:"delta"`
	// Replayed is true when the Idempotency-Key had been applied before:
	// this is the first call's answer, and nothing changed this time.
	// Left out otherwise.
	Replayed bool `json:"replayed,omitempty"`
}
