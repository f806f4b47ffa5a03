//go:build !unix

package stores

// writable is true where access(2) is not asked: OpenExisting opens the
// file for writing, as Open does.
func writable(string) bool { return true }
