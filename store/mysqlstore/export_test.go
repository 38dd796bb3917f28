package mysqlstore

// SetClaimHook makes every owned claim of s run f before its commit, with
// its locks held (tests only).
func SetClaimHook(s *Store, f func()) { s.claimHook = f }
