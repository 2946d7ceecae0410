package rollout

import "strings"

// lineDiff returns a line diff of a and b: unchanged lines prefixed by two
// spaces, removed by "- ", added by "+ ". Deterministic, for dry-runs and
// golden tests; the flags file renders one rule per line, so a line diff is
// exactly the change.
func lineDiff(a, b string) string {
	x := strings.Split(strings.TrimSuffix(a, "\n"), "\n")
	y := strings.Split(strings.TrimSuffix(b, "\n"), "\n")
	// Longest common subsequence table; flags files are small.
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var sb strings.Builder
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			sb.WriteString("  " + x[i] + "\n")
			i, j = i+1, j+1
		case j < len(y) && (i == len(x) || lcs[i][j+1] >= lcs[i+1][j]):
			sb.WriteString("+ " + y[j] + "\n")
			j++
		default:
			sb.WriteString("- " + x[i] + "\n")
			i++
		}
	}
	return sb.String()
}
