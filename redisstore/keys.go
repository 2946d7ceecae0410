package redisstore

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Key layout. Every key of a shop starts with the same hash tag, so a
// shop's keys share one Redis Cluster slot and a script may touch any of
// them:
//
//	<prefix>{shop:<shop>}:fence             STRING the shop's fence, "redis@3"
//	                                        (reservation.Fence's String form);
//	                                        absent means reservation.NoFence
//	<prefix>{shop:<shop>}:qty:<item>        HASH location -> quantity
//	                                        (ledger available minus held; may go
//	                                        below zero when the ledger is lowered
//	                                        under what is held)
//	<prefix>{shop:<shop>}:hold:<token>      HASH exp -> expiry (ms, Redis clock,
//	                                        or the database's for a hold MySQL
//	                                        decided), auth -> authority,
//	                                        a:<item>:<location> -> quantity,
//	                                        claiming -> Redis ms when a legacy
//	                                        claim of the hold started (optional)
//	<prefix>{shop:<shop>}:expiry            ZSET token scored by expiry (ms): the
//	                                        reaper's index and the list of a
//	                                        shop's holds
//	<prefix>{shop:<shop>}:tomb:<token>      STRING a tombstone (format: decodeTomb
//	                                        below), with TombstoneTTL
//	<prefix>{shop:<shop>}:tombs             ZSET token scored by when its
//	                                        tombstone is forgotten (ms): the list
//	                                        of a shop's tombstones, trimmed by
//	                                        every script that writes one
//	<prefix>{shop:<shop>}:op:<id>           STRING marker of the change-feed
//	                                        adjust <id> applied, for changeTTL
//	<prefix>{shop:<shop>}:copy              STRING the id of a copy of the shop
//	                                        into MySQL under way (copy.go), with
//	                                        copyTTL; while it exists every write
//	                                        of a hold or tombstone is logged
//	<prefix>{shop:<shop>}:chg               ZSET token scored by the position of
//	                                        its last change in the copy's log
//	<prefix>{shop:<shop>}:chgseq            STRING the log's last position
//	<prefix>{shop:<shop>}:copygen           STRING the last copy id given
//	<prefix>forced                          SET of shop ids Redis took by force
//	                                        while MySQL did not answer, until
//	                                        MySQL's fence is moved off them
//	                                        (mirror: the sweeper's fence-off)
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

func (k keys) fence() string            { return k.base + "fence" }
func (k keys) qty(item int64) string    { return k.base + "qty:" + strconv.FormatInt(item, 10) }
func (k keys) hold(token string) string { return k.base + "hold:" + token }
func (k keys) expiry() string           { return k.base + "expiry" }
func (k keys) tomb(token string) string { return k.base + "tomb:" + token }
func (k keys) tombs() string            { return k.base + "tombs" }
func (k keys) op(change int64) string   { return k.base + "op:" + strconv.FormatInt(change, 10) }
func (k keys) copy() string             { return k.base + "copy" }

func (s *Store) shopsKey() string { return s.cfg.Prefix + "shops" }

func (s *Store) forcedKey() string { return s.cfg.Prefix + "forced" }

// A tombstone is stored as one string of four fields separated by ';':
//
//	<state>;<hold expiry ms, 0 when none>;<allocations>;<short lines>
//
// with allocations and short lines in reservation.EncodeAllocations and
// EncodeShort form (digits, ':' and ',' only, so ';' cannot occur inside a
// field). Only the scripts write it (scripts.go, entomb).
//
// decodeTomb reads one back.
func decodeTomb(token, v string) (reservation.Tombstone, error) {
	f := strings.Split(v, ";")
	if len(f) != 4 {
		return reservation.Tombstone{}, fmt.Errorf("redisstore: tombstone of %q: %q has %d fields, want 4", token, v, len(f))
	}
	t := reservation.Tombstone{Token: token, State: reservation.State(f[0])}
	if !t.State.Terminal() {
		return reservation.Tombstone{}, fmt.Errorf("redisstore: tombstone of %q: state %q is not terminal", token, f[0])
	}
	exp, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return reservation.Tombstone{}, fmt.Errorf("redisstore: tombstone of %q: expiry %q: %w", token, f[1], err)
	}
	if exp != 0 {
		t.ExpiresAt = msTime(exp)
	}
	if t.Allocations, err = reservation.DecodeAllocations(f[2]); err != nil {
		return reservation.Tombstone{}, fmt.Errorf("redisstore: tombstone of %q: %w", token, err)
	}
	if t.Short, err = reservation.DecodeShort(f[3]); err != nil {
		return reservation.Tombstone{}, fmt.Errorf("redisstore: tombstone of %q: %w", token, err)
	}
	return t, nil
}

// holdRecord is a hold hash as read back from Redis.
type holdRecord struct {
	allocs    []reservation.Allocation
	expiresMS int64
	authority reservation.Authority
	// claimingMS is when a legacy claim of the hold started (0: none).
	claimingMS int64
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
		case field == "exp" || field == "claiming":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return holdRecord{}, fmt.Errorf("redisstore: hold record: %s %q: %w", field, value, err)
			}
			if field == "exp" {
				h.expiresMS = n
			} else {
				h.claimingMS = n
			}
		case field == "auth":
			h.authority = reservation.Authority(value)
		case strings.HasPrefix(field, "a:"):
			as, err := reservation.DecodeAllocations(field[2:] + ":" + value)
			if err != nil {
				return holdRecord{}, fmt.Errorf("redisstore: hold record: %w", err)
			}
			h.allocs = append(h.allocs, as...)
		}
	}
	reservation.SortAllocations(h.allocs)
	return h, nil
}

// parseHoldMap reads an HGETALL reply as go-redis's map gives it.
func parseHoldMap(m map[string]string) (holdRecord, error) {
	flat := make([]any, 0, 2*len(m))
	for f, v := range m {
		flat = append(flat, f, v)
	}
	return parseHold(flat)
}

// hold turns a record into the reservation.Hold it stands for.
func (h holdRecord) hold(shop int64, token string) reservation.Hold {
	return reservation.Hold{Shop: shop, Token: token, Allocations: h.allocs, ExpiresAt: msTime(h.expiresMS), Authority: h.authority}
}

// sameAllocs reports whether two sorted allocation lists are equal.
func sameAllocs(a, b []reservation.Allocation) bool { return slices.Equal(a, b) }

func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// timeMS is t in Unix ms, 0 for the zero time (a refused tombstone's
// expiry).
func timeMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
