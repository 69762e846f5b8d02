package shrink

import (
	"fmt"
	"strings"
)

// ddmin is Zeller and Hildebrandt's delta debugging ("Simplifying and
// Isolating Failure-Inducing Input", 2002): given items for which fails
// holds, it returns a subset for which fails still holds and from which no
// single item can be removed without losing the failure (1-minimal), testing
// subsets and complements of ever finer partitions. It never tests the empty
// set or a set it tested before. fails is called with items in their
// original order.
func ddmin[T any](items []T, fails func([]T) bool) []T {
	tested := map[string]bool{}
	test := func(idx []int) bool {
		key := keyOf(idx)
		if len(idx) == 0 || tested[key] {
			return false
		}
		tested[key] = true
		sub := make([]T, len(idx))
		for i, j := range idx {
			sub[i] = items[j]
		}
		return fails(sub)
	}
	cur := make([]int, len(items))
	for i := range cur {
		cur[i] = i
	}
	tested[keyOf(cur)] = true // given: it fails
	n := 2
	for len(cur) >= 2 {
		n = min(n, len(cur))
		chunks := split(cur, n)
		reduced := false
		for _, c := range chunks {
			if test(c) {
				cur, n, reduced = c, 2, true
				break
			}
		}
		if !reduced && n > 2 { // with two chunks the complements are the chunks
			for i := range chunks {
				if c := without(chunks, i); test(c) {
					cur, n, reduced = c, max(n-1, 2), true
					break
				}
			}
		}
		if reduced {
			continue
		}
		if n >= len(cur) {
			break
		}
		n = min(2*n, len(cur))
	}
	out := make([]T, len(cur))
	for i, j := range cur {
		out[i] = items[j]
	}
	return out
}

// split cuts idx into n runs of nearly equal length, in order.
func split(idx []int, n int) [][]int {
	var out [][]int
	start := 0
	for i := range n {
		end := start + (len(idx)-start)/(n-i)
		out = append(out, idx[start:end])
		start = end
	}
	return out
}

// without joins every chunk but the i-th.
func without(chunks [][]int, i int) []int {
	var out []int
	for j, c := range chunks {
		if j != i {
			out = append(out, c...)
		}
	}
	return out
}

func keyOf(idx []int) string {
	var b strings.Builder
	for _, i := range idx {
		fmt.Fprintf(&b, "%d,", i)
	}
	return b.String()
}
