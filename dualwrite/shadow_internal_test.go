package dualwrite

import "testing"

// The shadow calls of one token run in the order they were started, also
// when the first finishes while the second still waits: a third call
// (a release's comparison after a claim's, after the reserve's) must wait
// for the second, not run beside it, or it overtakes the call it depends
// on. And once the token's calls are done the order remembers nothing of
// it: it holds one entry per shadow call in flight, not one per cart the
// process ever served.
func TestShadowCallsOfATokenStayInOrder(t *testing.T) {
	o := tokenOrder{last: map[tokenKey]chan struct{}{}}
	k := tokenKey{shop: 1, token: "t"}
	prevA, a := o.enter(k)
	if prevA != nil {
		t.Fatalf("the token's first call waits for %v", prevA)
	}
	prevB, b := o.enter(k)
	if prevB != a {
		t.Fatalf("the second call does not wait for the first")
	}
	o.leave(k, a) // the first is done; the second runs
	prevC, c := o.enter(k)
	if prevC != b {
		t.Errorf("a call started after the first finished does not wait for the second (waits for %v)", prevC)
	}
	o.leave(k, b)
	o.leave(k, c)
	if n := len(o.last); n != 0 {
		t.Errorf("%d entries left once every call of the token is done, want 0", n)
	}
	// A token whose only call is done leaves nothing behind either.
	_, d := o.enter(tokenKey{shop: 1, token: "u"})
	o.leave(tokenKey{shop: 1, token: "u"}, d)
	if n := len(o.last); n != 0 {
		t.Errorf("%d entries left after a token's single call, want 0", n)
	}
}

// A shadow call of a token waits for the call of that token started
// before it: the order hands it the earlier call's channel, open while
// that call runs and closed once it is done. Without the wait a claim's
// comparison runs beside the shadow reserve it looks for (the caller
// claims while MySQL's shadow hold is still being placed), finds nothing
// and is filed as shadow_missing: a mismatch of the facade's own making
// that the rollout's gates would count against MySQL. A call without a
// token has nothing to be ordered by and waits for nothing.
func TestShadowCallOfATokenWaitsForTheOneBefore(t *testing.T) {
	o := tokenOrder{last: map[tokenKey]chan struct{}{}}
	k := tokenKey{shop: 1, token: "t"}
	_, first := o.enter(k)
	prev, second := o.enter(k)
	if first == nil || prev != first {
		t.Fatalf("the second call of a token waits for %v, want the first call's channel %v", prev, first)
	}
	select {
	case <-prev:
		t.Fatal("the second call may run while the first still runs")
	default:
	}
	o.leave(k, first)
	select {
	case <-prev:
	default:
		t.Fatal("the second call still waits once the first is done")
	}
	o.leave(k, second)

	none := tokenKey{shop: 1}
	p1, m1 := o.enter(none)
	p2, m2 := o.enter(none)
	if p1 != nil || p2 != nil {
		t.Errorf("calls without a token wait for %v and %v, want nothing", p1, p2)
	}
	o.leave(none, m1)
	o.leave(none, m2)
	if n := len(o.last); n != 0 {
		t.Errorf("%d entries left once every call is done, want 0", n)
	}
}
