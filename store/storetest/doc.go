// Package storetest is the conformance suite every SQL store (store/pgstore,
// store/mysqlstore, store/sqlitestore) runs against a real server. It checks
// the contracts of package store (what users call) and of package
// store/driver (what the relay calls) as they are relied on: migration,
// the raw-INSERT table contract and its bad rows (refused at INSERT or
// buried DEAD by the claim, never failing it), enqueueing inside the
// caller's transaction, out-of-order commits, batches, shard leases and
// their rebalancing, per-key order (retrying, delayed, dead, parked),
// leases and fencing, retry and dead-letter bookkeeping, retention of sent
// events, stats, and byte-exact payloads. It is the one suite of both
// seams, and changes with them.
//
// A store's test file builds its database handle and calls Run with a
// Harness. Open gives the suite a store over a table name the suite chose;
// it must not migrate, and it registers the clean-up that drops the tables.
// New builds a store without creating anything (the suite uses it to check
// that hostile names are refused and that concurrent migrations are safe).
// Run returns only after every subtest has finished, so the caller may close
// its database with defer.
//
//	func TestConformance(t *testing.T) {
//		pool, db := openTestDB(t) // *pgxpool.Pool and *sql.DB over the test server
//		newStore := func(opts store.Options) (*pgstore.Store, error) {
//			return pgstore.New(pool, pgstore.Config{Options: opts})
//		}
//		storetest.Run(t, storetest.Harness{
//			Name: "postgres",
//			New:  func(opts store.Options) (driver.Store, error) { return newStore(opts) },
//			Open: func(t *testing.T, opts store.Options) storetest.Fixture {
//				st, err := newStore(opts)
//				if err != nil {
//					t.Fatal(err)
//				}
//				t.Cleanup(func() {
//					st.Close()
//					for _, suffix := range []string{"", "_archive", "_migrations", "_claims"} {
//						db.Exec(`DROP TABLE IF EXISTS "` + opts.Table + suffix + `"`)
//					}
//				})
//				return storetest.Fixture{Store: st, DB: db, Table: st.Table(), Placeholder: storetest.Dollar}
//			},
//		})
//	}
//
// The subtests run in parallel, each on its own table; some wait about a
// second for leases and delays to pass. On PostgreSQL the whole suite takes
// about 15 s with -race on two cores. Set Harness.SingleWriter for a database that runs one
// writing transaction at a time (SQLite): the checks that need two open
// writing transactions are then skipped, and said so in the log.
package storetest
