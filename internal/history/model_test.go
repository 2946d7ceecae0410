package history

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

var p1 = Part{Shop: 1, Item: 1}

// h builds a history on p1: stock first (location 1 unless stockedAt says
// otherwise), then operations with explicit times (return -1: unknown
// outcome). Reserves name location 1 unless reserveAt says otherwise, and
// never expire unless reserveTTL says otherwise.
type h struct{ entries []Entry }

func stocked(n int64) *h { return (&h{}).stock(1, n) }

func stockedAt(ns ...int64) *h {
	b := &h{}
	for i, n := range ns {
		b.stock(int64(i+1), n)
	}
	return b
}

func (b *h) stock(loc, n int64) *h {
	b.entries = append(b.entries, Entry{Client: 100 + int(loc), Input: Input{Op: OpStock, Part: p1, Location: loc, Quantity: n}})
	return b
}

// unknownHorizon is how long after its call an answerless operation of
// these histories may take effect (the recorder's UnknownHorizon).
const unknownHorizon = 100

func (b *h) op(client int, call, ret int64, in Input, out Output) *h {
	in.Part = p1
	in.Return = ret
	if ret < 0 {
		ret, out.Unknown = math.MaxInt64, true
		in.Return = call + unknownHorizon
	}
	b.entries = append(b.entries, Entry{Client: client, Call: call, Return: ret, Input: in, Output: out})
	return b
}

func (b *h) reserve(client int, call, ret int64, token string, qty int64, out Output) *h {
	return b.reserveAt(client, call, ret, token, qty, []int64{1}, out)
}

func (b *h) reserveAt(client int, call, ret int64, token string, qty int64, locs []int64, out Output) *h {
	return b.op(client, call, ret, Input{Op: OpReserve, Token: token, Quantity: qty, Locations: locs}, out)
}

// reserveTTL reserves at location 1 a hold that may expire from call+ttl.
func (b *h) reserveTTL(client int, call, ret int64, token string, qty, ttl int64, out Output) *h {
	return b.op(client, call, ret, Input{Op: OpReserve, Token: token, Quantity: qty, Locations: []int64{1}, Deadline: call + ttl}, out)
}

func (b *h) claim(client int, call, ret int64, token string, out Output) *h {
	return b.op(client, call, ret, Input{Op: OpClaim, Token: token}, out)
}

func (b *h) release(client int, call, ret int64, token string, out Output) *h {
	return b.op(client, call, ret, Input{Op: OpRelease, Token: token}, out)
}

func reserved(q int64) Output { return reservedAt(q, 1) }
func reservedAt(q, loc int64) Output {
	return Output{Result: ResultReserved, Quantity: q, Location: loc}
}
func replayed(q int64) Output {
	return Output{Result: ResultReserved, Quantity: q, Location: 1, Replayed: true}
}
func short() Output                 { return Output{Result: ResultInsufficient, Short: true} }
func claimedOut(q int64) Output     { return claimedAt(q, 1) }
func claimedAt(q, loc int64) Output { return Output{Result: ResultClaimed, Quantity: q, Location: loc} }
func reclaimed(q int64) Output {
	return Output{Result: ResultClaimed, Quantity: q, Location: 1, Replayed: true}
}
func releasedOut(q int64) Output   { return Output{Result: ResultReleased, Quantity: q, Location: 1} }
func refusedAgain() Output         { return Output{Result: ResultInsufficient, Short: true, Replayed: true} }
func retried(out Output) Output    { out.Retried = true; return out }
func answer(name string) Output    { return Output{Result: name} }
func notReleased() Output          { return Output{Result: ResultNotReleased} }
func unknownOut(err string) Output { return Output{Err: err} }

func TestModel(t *testing.T) {
	cases := []struct {
		name string
		h    *h
		want porcupine.CheckResult
	}{
		{"reserve claim release", stocked(3).
			reserve(1, 1, 2, "a", 2, reserved(2)).
			reserve(2, 3, 4, "b", 2, short()).
			claim(1, 5, 6, "a", claimedOut(2)).
			claim(1, 7, 8, "a", reclaimed(2)).
			reserve(2, 9, 10, "c", 1, reserved(1)).
			release(2, 11, 12, "c", releasedOut(1)).
			release(2, 13, 14, "c", notReleased()).
			release(1, 15, 16, "a", answer("already_claimed")).
			claim(2, 17, 18, "c", answer("released")).
			claim(2, 19, 20, "never", answer("not_found")), porcupine.Ok},
		{"oversell: two holds of the last unit", stocked(1).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			reserve(2, 3, 4, "b", 1, reserved(1)), porcupine.Illegal},
		{"concurrent race for the last unit, one wins", stocked(1).
			reserve(1, 1, 10, "a", 1, short()).
			reserve(2, 2, 9, "b", 1, reserved(1)), porcupine.Ok},
		{"undersell: refused with stock free", stocked(5).
			reserve(1, 1, 2, "a", 1, short()), porcupine.Illegal},
		{"another line's shortage is not this line's", stocked(5).
			reserve(1, 1, 2, "a", 1, Output{Result: ResultInsufficient}), porcupine.Ok},
		{"claimed twice", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			claim(1, 3, 4, "a", claimedOut(1)).
			claim(1, 5, 6, "a", claimedOut(1)), porcupine.Illegal},
		{"claim of a released hold", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			release(1, 3, 4, "a", releasedOut(1)).
			claim(1, 5, 6, "a", claimedOut(1)), porcupine.Illegal},
		{"released after claimed", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			claim(1, 3, 4, "a", claimedOut(1)).
			release(1, 5, 6, "a", releasedOut(1)), porcupine.Illegal},
		{"acknowledged hold lost", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			claim(1, 3, 4, "a", answer("not_found")), porcupine.Illegal},
		{"second hold for a retried token", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			reserve(1, 3, 4, "a", 1, reserved(1)), porcupine.Illegal},
		{"claim deducted another quantity", stocked(5).
			reserve(1, 1, 2, "a", 2, reserved(2)).
			claim(1, 3, 4, "a", claimedOut(1)), porcupine.Illegal},
		// A reserve without an answer, then its retry answered from the
		// hold: the first call took effect.
		{"unknown reserve, replayed retry", stocked(1).
			reserve(1, 1, -1, "a", 1, unknownOut("i/o timeout")).
			reserve(2, 3, 4, "a", 1, replayed(1)).
			reserve(3, 5, 6, "b", 1, short()), porcupine.Ok},
		// A reserve without an answer may not have happened: a fresh hold
		// on retry is fine too.
		{"unknown reserve, fresh retry", stocked(1).
			reserve(1, 1, -1, "a", 1, unknownOut("EOF")).
			reserve(2, 3, 4, "a", 1, reserved(1)), porcupine.Ok},
		// An unknown claim may land any time after its call, even after
		// a later call of the same token returned.
		{"unknown claim, lands late", stocked(2).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			claim(2, 3, -1, "a", unknownOut("invalid connection")).
			claim(1, 5, 6, "a", reclaimed(1)), porcupine.Ok},
		{"unknown claims cannot make a second deduction legal", stocked(2).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			claim(2, 3, -1, "a", unknownOut("invalid connection")).
			claim(1, 5, 6, "a", claimedOut(1)).
			claim(1, 7, 8, "a", claimedOut(1)), porcupine.Illegal},
		{"unknown release frees the unit for a later reserve", stocked(1).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			release(1, 3, -1, "a", unknownOut("connection reset")).
			reserve(2, 5, 6, "b", 1, reserved(1)), porcupine.Ok},

		// Several eligible locations: the answer says which served the
		// line, and the model holds each location's stock.
		{"second location serves when the first is out", stockedAt(1, 1).
			reserveAt(1, 1, 2, "a", 1, []int64{1, 2}, reservedAt(1, 1)).
			reserveAt(1, 3, 4, "b", 1, []int64{1, 2}, reservedAt(1, 2)).
			reserveAt(1, 5, 6, "c", 1, []int64{2, 1}, short()).
			claim(1, 7, 8, "b", claimedAt(1, 2)), porcupine.Ok},
		{"oversell at the second location", stockedAt(1, 1).
			reserveAt(1, 1, 2, "a", 1, []int64{2}, reservedAt(1, 2)).
			reserveAt(1, 3, 4, "b", 1, []int64{1, 2}, reservedAt(1, 2)), porcupine.Illegal},
		{"served from a location the line did not name", stockedAt(5, 5).
			reserveAt(1, 1, 2, "a", 1, []int64{1}, reservedAt(1, 2)), porcupine.Illegal},
		{"a split line", stockedAt(5, 5).
			reserveAt(1, 1, 2, "a", 2, []int64{1, 2}, reservedAt(2, -1)), porcupine.Illegal},
		{"undersell: refused while another eligible location has stock", stockedAt(0, 3).
			reserveAt(1, 1, 2, "a", 1, []int64{1, 2}, short()), porcupine.Illegal},
		{"claim deducted from another location than the hold's", stockedAt(5, 5).
			reserveAt(1, 1, 2, "a", 1, []int64{1, 2}, reservedAt(1, 1)).
			claim(1, 3, 4, "a", claimedAt(1, 2)), porcupine.Illegal},

		// Expiry: from its deadline on, a hold may be reaped and its
		// units sold again; before it, they may not.
		{"expired hold's units sold again", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			reserve(2, 20, 21, "b", 1, reserved(1)).
			claim(1, 30, 31, "a", answer("expired")), porcupine.Ok},
		{"hold's units sold before its deadline", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 100, reserved(1)).
			reserve(2, 20, 21, "b", 1, reserved(1)), porcupine.Illegal},
		{"expired but not reaped yet: refusal is no undersell", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			reserve(2, 20, 21, "b", 1, short()).
			reserve(2, 30, 31, "c", 1, reserved(1)), porcupine.Ok},
		{"claim refused as not found before the deadline", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 100, reserved(1)).
			claim(1, 20, 21, "a", answer("not_found")), porcupine.Illegal},
		{"a hold reaped for a reserve cannot be claimed after", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			reserve(2, 20, 21, "b", 1, reserved(1)).
			claim(1, 30, 31, "a", claimedOut(1)), porcupine.Illegal},
		// Reaping frees only what a reserve needs, oldest deadline first:
		// a refusal after it still sees the other expired hold as held.
		{"reaped as needed, oldest first", stocked(2).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			reserveTTL(2, 3, 4, "b", 1, 10, reserved(1)).
			reserve(3, 20, 21, "c", 1, reserved(1)).
			reserve(3, 22, 23, "d", 1, short()).
			claim(2, 24, 25, "b", answer("expired")), porcupine.Ok},
		{"reaped as needed, not more", stocked(2).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			reserveTTL(2, 3, 4, "b", 1, 10, reserved(1)).
			reserve(3, 20, 21, "c", 2, reserved(2)).
			reserve(3, 22, 23, "d", 1, reserved(1)), porcupine.Illegal},
		// A call retried inside one operation may be answered with a
		// replay of its own first attempt.
		{"retried claim answered as a replay", stocked(2).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			claim(1, 3, 4, "a", Output{Result: ResultClaimed, Quantity: 1, Location: 1, Replayed: true, Retried: true}).
			reserve(2, 5, 6, "b", 1, reserved(1)).
			reserve(2, 7, 8, "c", 1, short()), porcupine.Ok},
		{"a replay without a retry is not a claim", stocked(2).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			claim(1, 3, 4, "a", reclaimed(1)), porcupine.Illegal},
		{"retried release answered as nothing to release", stocked(1).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			release(1, 3, 4, "a", Output{Result: ResultNotReleased, Retried: true}).
			reserve(2, 5, 6, "b", 1, reserved(1)), porcupine.Ok},
		{"retried reserve answered as a replay", stocked(1).
			reserve(1, 1, 2, "a", 1, Output{Result: ResultReserved, Quantity: 1, Location: 1, Replayed: true, Retried: true}).
			reserve(2, 3, 4, "b", 1, short()), porcupine.Ok},
		// An answerless reserve may land late, but not so late that it
		// could reap a hold whose deadline is far off (found in review:
		// it used to free that hold's units for everyone).
		{"unknown reserve cannot reap a live hold", stocked(3).
			reserveTTL(1, 1, 2, "a", 3, 1000, reserved(3)).
			reserve(2, 5, -1, "u", 1, unknownOut("timeout")).
			reserve(3, 10, 11, "b", 1, reserved(1)).
			reserve(3, 12, 13, "c", 1, reserved(1)), porcupine.Illegal},
		{"unknown reserve may reap a hold expiring within its horizon", stocked(3).
			reserveTTL(1, 1, 2, "a", 3, 50, reserved(3)).
			reserve(2, 5, -1, "u", 1, unknownOut("timeout")).
			reserve(3, 60, 61, "b", 1, reserved(1)).
			reserve(3, 62, 63, "c", 1, reserved(1)), porcupine.Ok},
		{"a hold without a TTL never expires", stocked(1).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			reserve(2, 1000, 1001, "b", 1, reserved(1)), porcupine.Illegal},
		{"a hold without a TTL is never answered expired", stocked(1).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			claim(1, 1000, 1001, "a", answer("expired")), porcupine.Illegal},

		// Tombstones: every state after held is final, and a call on a
		// token that reached one is answered from it.
		// A released token: claim and reserve answer "released", a
		// release answers nothing released.
		{"released token: released, released, not released", stocked(1).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			release(1, 3, 4, "a", releasedOut(1)).
			claim(1, 5, 6, "a", answer("released")).
			reserve(1, 7, 8, "a", 1, answer("released")).
			release(1, 9, 10, "a", notReleased()).
			reserve(2, 11, 12, "b", 1, reserved(1)), porcupine.Ok},
		{"claim succeeds after an acknowledged release", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			release(1, 3, 4, "a", releasedOut(1)).
			claim(1, 5, 6, "a", claimedOut(1)), porcupine.Illegal},
		{"claim after an acknowledged release, answered as a retried replay", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			release(1, 3, 4, "a", releasedOut(1)).
			claim(1, 5, 6, "a", retried(reclaimed(1))), porcupine.Illegal},
		{"late claim of a released token answers not_found", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			release(1, 3, 4, "a", releasedOut(1)).
			claim(1, 5, 6, "a", answer("not_found")), porcupine.Illegal},
		{"reserve of a released token answers reserved again", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			release(1, 3, 4, "a", releasedOut(1)).
			reserve(1, 5, 6, "a", 1, reserved(1)), porcupine.Illegal},
		{"reserve of a released token answers a replayed hold", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			release(1, 3, 4, "a", releasedOut(1)).
			reserve(1, 5, 6, "a", 1, retried(replayed(1))), porcupine.Illegal},
		{"reserve of a released token answers insufficient", stocked(1).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			release(1, 3, 4, "a", releasedOut(1)).
			reserve(2, 5, 6, "b", 1, reserved(1)).
			reserve(1, 7, 8, "a", 1, short()), porcupine.Illegal},
		{"a released token released again", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			release(1, 3, 4, "a", releasedOut(1)).
			release(1, 5, 6, "a", releasedOut(1)), porcupine.Illegal},
		{"release answered with the released error", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			release(1, 3, 4, "a", releasedOut(1)).
			release(1, 5, 6, "a", Output{Result: "released", Err: "reservation: released"}), porcupine.Illegal},
		{"claim of a held token answers released", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			claim(1, 3, 4, "a", answer("released")), porcupine.Illegal},
		{"an unknown release lands, the claim answers released", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			release(1, 3, -1, "a", unknownOut("timeout")).
			claim(1, 5, 6, "a", answer("released")), porcupine.Ok},

		// A claimed token: a release answers already_claimed, a reserve
		// already_claimed, a claim a replay.
		{"claimed token: already claimed, already claimed, replayed", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			claim(1, 3, 4, "a", claimedOut(1)).
			release(1, 5, 6, "a", answer("already_claimed")).
			reserve(1, 7, 8, "a", 1, answer("already_claimed")).
			claim(1, 9, 10, "a", reclaimed(1)), porcupine.Ok},
		{"release after claim answers released", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			claim(1, 3, 4, "a", claimedOut(1)).
			release(1, 5, 6, "a", releasedOut(1)), porcupine.Illegal},
		{"release after claim answers not released", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			claim(1, 3, 4, "a", claimedOut(1)).
			release(1, 5, 6, "a", notReleased()), porcupine.Illegal},
		{"late claim of a claimed token answers not_found", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			claim(1, 3, 4, "a", claimedOut(1)).
			claim(1, 5, 6, "a", answer("not_found")), porcupine.Illegal},
		{"reserve of a claimed token answers a replayed hold", stocked(5).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			claim(1, 3, 4, "a", claimedOut(1)).
			reserve(1, 5, 6, "a", 1, replayed(1)), porcupine.Illegal},

		// A refused token: its refusal is replayed, a claim finds
		// nothing, a release releases nothing; it never holds.
		{"refused token: refused again, not found, not released", stocked(1).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			reserve(2, 3, 4, "b", 1, short()).
			release(1, 5, 6, "a", releasedOut(1)).
			reserve(2, 7, 8, "b", 1, refusedAgain()).
			reserve(2, 9, 10, "b", 1, short()).
			claim(2, 11, 12, "b", answer("not_found")).
			release(2, 13, 14, "b", notReleased()).
			reserve(3, 15, 16, "c", 1, reserved(1)), porcupine.Ok},
		{"reserve answers reserved after the same token was refused", stocked(1).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			reserve(2, 3, 4, "b", 1, short()).
			release(1, 5, 6, "a", releasedOut(1)).
			reserve(2, 7, 8, "b", 1, reserved(1)), porcupine.Illegal},
		{"a refused token's retried reserve answers a replayed hold", stocked(1).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			reserve(2, 3, 4, "b", 1, short()).
			release(1, 5, 6, "a", releasedOut(1)).
			reserve(2, 7, 8, "b", 1, retried(replayed(1))), porcupine.Illegal},
		// Another line of the cart was short: this line's item has the
		// stock, and the token is refused here too.
		{"refused for another line, then reserved", stocked(5).
			reserve(1, 1, 2, "a", 1, Output{Result: ResultInsufficient}).
			reserve(1, 3, 4, "a", 1, reserved(1)), porcupine.Illegal},
		{"refused for another line, refused again", stocked(5).
			reserve(1, 1, 2, "a", 1, Output{Result: ResultInsufficient}).
			reserve(1, 3, 4, "a", 1, Output{Result: ResultInsufficient, Replayed: true}).
			claim(1, 5, 6, "a", answer("not_found")), porcupine.Ok},
		{"a refusal replayed that nobody was given", stocked(0).
			reserve(1, 1, 2, "a", 1, refusedAgain()), porcupine.Illegal},
		{"retried reserve answered as its own refusal", stocked(0).
			reserve(1, 1, 2, "a", 1, retried(refusedAgain())), porcupine.Ok},
		{"an unknown reserve may have refused", stocked(5).
			reserve(1, 1, -1, "a", 1, unknownOut("timeout")).
			reserve(1, 3, 4, "a", 1, refusedAgain()), porcupine.Ok},
		{"an unknown reserve may have done nothing", stocked(5).
			reserve(1, 1, -1, "a", 1, unknownOut("timeout")).
			reserve(1, 3, 4, "a", 1, reserved(1)), porcupine.Ok},
		// The first attempt of a reserve, delayed past its own retry's
		// refusal, cannot take the unit a release frees later.
		{"a delayed first attempt creates nothing", stocked(1).
			reserve(1, 1, 2, "b", 1, reserved(1)).
			reserve(2, 3, -1, "a", 1, unknownOut("timeout")).
			reserve(3, 5, 6, "a", 1, short()).
			release(1, 7, 8, "b", releasedOut(1)).
			reserve(4, 9, 10, "c", 1, short()), porcupine.Illegal},
		{"insufficient for a held token", stocked(1).
			reserve(1, 1, 2, "a", 1, reserved(1)).
			reserve(1, 3, 4, "a", 1, short()), porcupine.Illegal},
		{"a refused token cannot be claimed", stocked(1).
			reserve(1, 1, 2, "a", 1, Output{Result: ResultInsufficient}).
			claim(1, 3, 4, "a", claimedOut(1)), porcupine.Illegal},

		// An expired token: its tombstone answers "expired" to a reserve
		// and a claim, and nothing released to a release.
		{"expired token: expired, expired, not released", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			reserve(2, 20, 21, "b", 1, reserved(1)).
			claim(1, 30, 31, "a", answer("expired")).
			reserve(1, 32, 33, "a", 1, answer("expired")).
			release(1, 34, 35, "a", notReleased()), porcupine.Ok},
		{"late claim of an expired token answers not_found", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			claim(1, 30, 31, "a", answer("not_found")), porcupine.Illegal},
		{"late claim of a reaped token answers not_found", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			reserve(2, 20, 21, "b", 1, reserved(1)).
			claim(1, 30, 31, "a", answer("not_found")), porcupine.Illegal},
		{"a reaped token reserved again", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			reserve(2, 20, 21, "b", 1, reserved(1)).
			release(2, 22, 23, "b", releasedOut(1)).
			reserve(1, 30, 31, "a", 1, reserved(1)), porcupine.Illegal},
		{"expired answered before the deadline", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 100, reserved(1)).
			claim(1, 20, 21, "a", answer("expired")), porcupine.Illegal},
		// A hold past its deadline that no reaper took yet may still be
		// claimed or released; once an answer said it expired, it stays
		// expired, its units held until something needs them.
		{"past its deadline, claimed", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			claim(1, 30, 31, "a", claimedOut(1)), porcupine.Ok},
		{"past its deadline, released", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			release(1, 30, 31, "a", releasedOut(1)).
			claim(1, 32, 33, "a", answer("released")), porcupine.Ok},
		{"past its deadline, nothing released, then expired", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			release(1, 30, 31, "a", notReleased()).
			claim(1, 32, 33, "a", answer("expired")), porcupine.Ok},
		{"past its deadline, nothing released, then claimed", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			release(1, 30, 31, "a", notReleased()).
			claim(1, 32, 33, "a", claimedOut(1)), porcupine.Illegal},
		{"claimed after a claim answered expired", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			claim(1, 30, 31, "a", answer("expired")).
			claim(1, 32, 33, "a", claimedOut(1)), porcupine.Illegal},
		{"reserved again after a reserve answered expired", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			reserve(1, 30, 31, "a", 1, answer("expired")).
			reserve(1, 32, 33, "a", 1, reserved(1)), porcupine.Illegal},
		{"answered expired, its units not yet reaped, then reaped", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 10, reserved(1)).
			claim(1, 30, 31, "a", answer("expired")).
			reserve(2, 32, 33, "b", 1, short()).
			reserve(3, 34, 35, "c", 1, reserved(1)).
			release(1, 36, 37, "a", notReleased()), porcupine.Ok},
		{"release of a live hold answers nothing released", stocked(1).
			reserveTTL(1, 1, 2, "a", 1, 100, reserved(1)).
			release(1, 3, 4, "a", notReleased()), porcupine.Illegal},
	}
	dir := t.TempDir()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Check(tc.h.entries, CheckOptions{Dir: dir, Name: strings.ReplaceAll(tc.name, " ", "_")})
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != tc.want {
				t.Errorf("case %d: %s, want %s", i, res, tc.want)
			}
			if tc.want == porcupine.Illegal {
				for _, p := range []string{res.HTML, res.JSON} {
					if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
						t.Errorf("artifact %q: %v", p, err)
					}
				}
				// The JSON artifact reads back as the same history.
				back, err := ReadEntries(res.JSON)
				if err != nil || len(back) != len(tc.h.entries) {
					t.Errorf("read back %s: %d entries, %v", res.JSON, len(back), err)
				}
			}
		})
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.html")); len(files) == 0 {
		t.Error("no visualization written for the illegal histories")
	}
}

// A history without the key's stock operation is refused: the model cannot
// judge stock it was not told.
func TestModelNeedsStock(t *testing.T) {
	b := &h{}
	b.reserve(1, 1, 2, "a", 1, reserved(1))
	res, err := Check(b.entries, CheckOptions{Dir: t.TempDir()})
	if err != nil || res.Outcome != porcupine.Illegal {
		t.Errorf("%s %v, want Illegal", res, err)
	}
}
