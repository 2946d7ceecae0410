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
