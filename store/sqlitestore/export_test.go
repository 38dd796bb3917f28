package sqlitestore

// SetAfterWalk makes f run between a claim's walk and its write
// transaction (nil: nothing), for tests of what changes in between.
func SetAfterWalk(f func()) { afterWalk = f }
