package p

func f(a, b int) int {
	if a < b {
		a++
	}
	return -a * b
}
