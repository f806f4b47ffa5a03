package postgres

// Listens reports how many times the store's Watch listener has
// established LISTEN (1 after the first connection, more after reconnects).
func Listens(s *Store) int {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	return s.watch.listens
}
