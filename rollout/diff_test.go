package rollout

import "testing"

func TestLineDiff(t *testing.T) {
	got := lineDiff("a\nb\nc\n", "a\nx\nc\n")
	if got != "  a\n- b\n+ x\n  c\n" && got != "  a\n+ x\n- b\n  c\n" {
		t.Errorf("diff:\n%s", got)
	}
}
