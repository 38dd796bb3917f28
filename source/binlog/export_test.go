package binlog

// Crash stops s the way a killed process stops: streaming ends, and the
// lease stays taken until it expires. For tests.
func (s *Source) Crash() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if s.cancel != nil {
		s.cancel()
	}
	s.done.Wait()
}
