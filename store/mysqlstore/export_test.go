package mysqlstore

import "context"

// SetClaimHook makes every owned claim of s run f before its commit, with
// its locks held (tests only).
func SetClaimHook(s *Store, f func()) { s.claimHook = f }

// MigrateTo applies the migrations of s up to version v (tests only: a
// table of an earlier schema version).
func MigrateTo(ctx context.Context, s *Store, v int) error { return s.migrate(ctx, v) }
