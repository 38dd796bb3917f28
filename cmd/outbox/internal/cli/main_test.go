package cli

import (
	"testing"

	"go.uber.org/goleak"
)

// Nothing a test starts may outlive it. rocketmq-client-go starts one
// goroutine when its package is loaded (a cache's janitor, for the life of
// the process), whether or not a test uses RocketMQ.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/patrickmn/go-cache.(*janitor).Run"))
}
