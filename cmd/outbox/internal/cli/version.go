package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
)

// runVersion prints what this binary was built from: the module version
// (v1.2.3 when installed with `go install …@v1.2.3`, "(devel)" when built
// from a checkout), and the VCS revision the go command stamped in, when it
// did (`go build` and `go install` in a git checkout; not `go run`).
func runVersion(_ context.Context, e env, args []string) error {
	f := newBareFlags(e, "version", "version")
	if err := f.parse(e, args); err != nil {
		return err
	}
	if len(f.posArgs()) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", wire.ErrUsage, f.posArgs()[0])
	}
	fmt.Fprintln(e.stdout, versionLine())
	return nil
}

func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "outbox (no build information) " + runtime.Version()
	}
	line := "outbox " + bi.Main.Version
	if bi.Main.Version == "" {
		line = "outbox (devel)"
	}
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev != "" {
		line += fmt.Sprintf(" (revision %s%s", rev, modified)
		if at != "" {
			line += " of " + at
		}
		line += ")"
	}
	return fmt.Sprintf("%s %s %s/%s", line, bi.GoVersion, runtime.GOOS, runtime.GOARCH)
}
