// Package suggest finds the name a user most likely meant when they typed one that does not
// exist (a model, a step, a tool, a provider): the known name nearest by edit distance, for the
// "did you mean" of an error.
package suggest

import "math"

// Closest returns the name of known nearest to name when it is a likely typo, else "": at most
// 2 edits away (1 for names of 3 bytes or fewer), and never name itself.
func Closest(name string, known []string) string {
	best, bestDist := "", 3
	if len(name) <= 3 {
		bestDist = 2
	}
	for _, k := range known {
		if d := Distance(name, k); d > 0 && d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// Distance is the Levenshtein distance between a and b, on bytes; names longer than 64 bytes
// are not compared (math.MaxInt).
func Distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
