package history

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

var k1 = Key{Shop: 1, Item: 1, Location: 1}

// h builds a history on k1: stock first, then operations with explicit
// times (return -1: unknown outcome).
type h struct{ entries []Entry }

func stocked(n int64) *h {
	return &h{entries: []Entry{{Client: 0, Input: Input{Op: OpStock, Key: k1, Quantity: n}}}}
}

func (b *h) op(client int, call, ret int64, in Input, out Output) *h {
	in.Key = k1
	if ret < 0 {
		ret, out.Unknown = math.MaxInt64, true
	}
	b.entries = append(b.entries, Entry{Client: client, Call: call, Return: ret, Input: in, Output: out})
	return b
}

func (b *h) reserve(client int, call, ret int64, token string, qty int64, out Output) *h {
	return b.op(client, call, ret, Input{Op: OpReserve, Token: token, Quantity: qty}, out)
}

func (b *h) claim(client int, call, ret int64, token string, out Output) *h {
	return b.op(client, call, ret, Input{Op: OpClaim, Token: token}, out)
}

func (b *h) release(client int, call, ret int64, token string, out Output) *h {
	return b.op(client, call, ret, Input{Op: OpRelease, Token: token}, out)
}

func reserved(q int64) Output      { return Output{Result: ResultReserved, Quantity: q} }
func replayed(q int64) Output      { return Output{Result: ResultReserved, Quantity: q, Replayed: true} }
func short() Output                { return Output{Result: ResultInsufficient, Short: true} }
func claimedOut(q int64) Output    { return Output{Result: ResultClaimed, Quantity: q} }
func reclaimed(q int64) Output     { return Output{Result: ResultClaimed, Quantity: q, Replayed: true} }
func releasedOut(q int64) Output   { return Output{Result: ResultReleased, Quantity: q} }
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
			claim(2, 17, 18, "c", answer("not_found")), porcupine.Ok},
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
