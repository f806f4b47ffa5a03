// Package editdist measures how far apart two names are, to suggest the
// name a typo was meant to be ("did you mean ...?").
package editdist

import "strings"

// Distance is the Levenshtein distance between a and b, in bytes.
func Distance(a, b string) int {
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

// Near returns the name of names that key is a typo of: the nearest
// within an edit distance of 2, compared without case, the first on a tie;
// "" if key is one of names or none is that near.
func Near(key string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if key == n {
			return ""
		}
		if d := Distance(strings.ToLower(key), n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// DistanceSwap is Distance with the swap of two adjacent bytes counted as
// one edit ("passwrod" is one from "password"), the optimal string
// alignment distance.
func DistanceSwap(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
