//go:build !linux

package bench

import "errors"

func pin(int, []int) ([]int, error) {
	return nil, errors.New("pinning processes to CPUs needs Linux")
}
