package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binDir    string
	binary    string
	buildErr  error
)

// OutboxBinary builds the outbox command (with -race) once per test binary
// and returns its path; a TestMain calls RemoveOutboxBinary when the tests
// are over.
func OutboxBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "outbox-test-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binDir, binary = dir, filepath.Join(dir, "outbox")
		cmd := exec.Command("go", "build", "-race", "-o", binary, "github.com/outbox-go/outbox/cmd/outbox")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			buildErr = fmt.Errorf("building the outbox command: %v\n%s", err, out.String())
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// RemoveOutboxBinary removes what OutboxBinary built (105 MiB), if anything.
func RemoveOutboxBinary() {
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}
