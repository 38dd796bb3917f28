//go:build unix

package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestRemoveStale: the folder of a process that has ended goes, those of
// a running process and of a name without a pid stay.
func TestRemoveStale(t *testing.T) {
	tmp := t.TempDir()
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(tmp, binPrefix+strconv.Itoa(done.Process.Pid)+"-123")
	mine := filepath.Join(tmp, binPrefix+strconv.Itoa(os.Getpid())+"-456")
	other := filepath.Join(tmp, binPrefix+"789")
	for _, d := range []string{gone, mine, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "outbox"), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	removeStale(tmp)
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("the folder of ended process %d is still there (stat: %v)", done.Process.Pid, err)
	}
	for _, d := range []string{mine, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed (stat: %v); only ended processes' folders may go", filepath.Base(d), err)
		}
	}
}
