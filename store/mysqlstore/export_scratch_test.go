package mysqlstore

func ClaimSQLForTest(s *Store, hold bool) string { return s.buildClaimSQL(hold) }
