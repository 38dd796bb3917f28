package cli

import (
	"testing"

	"go.uber.org/goleak"
)

// Nothing a test starts may outlive it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
