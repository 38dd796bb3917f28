package relay_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every relay, store and broker a test starts must be gone when it ends.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
