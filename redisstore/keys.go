package redisstore

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Key layout. Every key of a shop starts with the same hash tag, so a
// shop's keys share one Redis Cluster slot and a script may touch any of
// them:
//
//	<prefix>{shop:<shop>}:qty:<item>        HASH location -> quantity
//	                                        (ledger available minus held; may go
//	                                        below zero when the ledger is lowered
//	                                        under what is held)
//	<prefix>{shop:<shop>}:hold:<token>      HASH exp -> expiry (ms, Redis clock),
//	                                        auth -> authority,
//	                                        a:<item>:<location> -> quantity
//	<prefix>{shop:<shop>}:expiry            ZSET token scored by expiry (ms): the
//	                                        reaper's index and the list of a
//	                                        shop's holds
//	<prefix>{shop:<shop>}:claimed:<token>   STRING the deducted allocations
//	                                        ("item:location:quantity,..."), with
//	                                        ClaimedTTL
//	<prefix>{shop:<shop>}:op:<id>           STRING an adjust's idempotency
//	                                        marker, for opTTL
//	<prefix>shops                           SET of shop ids, so the reaper finds
//	                                        every expiry index. On a cluster it
//	                                        lives in another slot, so no script
//	                                        touches it together with shop keys.
//
// Item and location ids travel to Lua as decimal strings and are only used
// in key and field names there: Lua numbers are doubles, exact only up to
// 2^53, and ids may be any positive int64.
type keys struct {
	base string // <prefix>{shop:<shop>}:
}

func (s *Store) shopKeys(shop int64) keys {
	return keys{base: s.cfg.Prefix + "{shop:" + strconv.FormatInt(shop, 10) + "}:"}
}

func (k keys) qty(item int64) string       { return k.base + "qty:" + strconv.FormatInt(item, 10) }
func (k keys) hold(token string) string    { return k.base + "hold:" + token }
func (k keys) claimed(token string) string { return k.base + "claimed:" + token }
func (k keys) expiry() string              { return k.base + "expiry" }
func (k keys) op(id string) string         { return k.base + "op:" + id }

func (s *Store) shopsKey() string { return s.cfg.Prefix + "shops" }

// encodeAllocs is the claimed marker's format, also how allocations travel
// to scripts as one argument.
func encodeAllocs(as []reservation.Allocation) string {
	var b strings.Builder
	for i, a := range as {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d:%d", a.Item, a.Location, a.Quantity)
	}
	return b.String()
}

func decodeAllocs(s string) ([]reservation.Allocation, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]reservation.Allocation, 0, len(parts))
	for _, p := range parts {
		a, err := parseTriple(p)
		if err != nil {
			return nil, fmt.Errorf("redisstore: allocations %q: %w", s, err)
		}
		out = append(out, a)
	}
	reservation.SortAllocations(out)
	return out, nil
}

func parseTriple(p string) (reservation.Allocation, error) {
	f := strings.Split(p, ":")
	if len(f) != 3 {
		return reservation.Allocation{}, fmt.Errorf("bad allocation %q", p)
	}
	var n [3]int64
	for i, x := range f {
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return reservation.Allocation{}, fmt.Errorf("bad allocation %q: %w", p, err)
		}
		n[i] = v
	}
	return reservation.Allocation{Item: n[0], Location: n[1], Quantity: n[2]}, nil
}

// holdRecord is a hold hash as read back from Redis.
type holdRecord struct {
	allocs    []reservation.Allocation
	expiresMS int64
	authority reservation.Authority
}

// parseHold reads an HGETALL reply (a flat field, value list).
func parseHold(v any) (holdRecord, error) {
	flat, ok := v.([]any)
	if !ok || len(flat)%2 != 0 {
		return holdRecord{}, fmt.Errorf("redisstore: hold record: unexpected reply %v", v)
	}
	var h holdRecord
	for i := 0; i < len(flat); i += 2 {
		field, _ := flat[i].(string)
		value, _ := flat[i+1].(string)
		switch {
		case field == "exp":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return holdRecord{}, fmt.Errorf("redisstore: hold record: expiry %q: %w", value, err)
			}
			h.expiresMS = n
		case field == "auth":
			h.authority = reservation.Authority(value)
		case strings.HasPrefix(field, "a:"):
			a, err := parseTriple(field[2:] + ":" + value)
			if err != nil {
				return holdRecord{}, fmt.Errorf("redisstore: hold record: %w", err)
			}
			h.allocs = append(h.allocs, a)
		}
	}
	reservation.SortAllocations(h.allocs)
	return h, nil
}

// sameAllocs reports whether two sorted allocation lists are equal.
func sameAllocs(a, b []reservation.Allocation) bool { return slices.Equal(a, b) }
