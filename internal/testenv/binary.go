package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// binPrefix starts the name of the folder OutboxBinary builds in; the
// building process's pid and a dash follow it.
const binPrefix = "outbox-test-bin-"

var (
	buildOnce sync.Once
	binDir    string
	binary    string
	buildErr  error
)

// OutboxBinary builds the outbox command (with -race) once per test binary
// and returns its path; a TestMain calls RemoveOutboxBinary when the tests
// are over. A test process that panicked, timed out or was killed never
// got there, so the first build of each process also removes the binaries
// of earlier test processes that are gone (removeStale).
func OutboxBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		removeStale(os.TempDir())
		dir, err := os.MkdirTemp("", binPrefix+strconv.Itoa(os.Getpid())+"-")
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

// removeStale removes the folders under tmp that OutboxBinary made in
// processes that no longer run (a pid that no process has). A folder whose
// name holds no pid is left alone, as is one whose pid was reused.
func removeStale(tmp string) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, binPrefix+"*"))
	for _, d := range dirs {
		head, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(d), binPrefix), "-")
		pid, err := strconv.Atoi(head)
		if !ok || err != nil || pid <= 0 || alive(pid) {
			continue
		}
		_ = os.RemoveAll(d)
	}
}
