package cli

import (
	"context"
	"errors"
)

func runBench(ctx context.Context, e env, args []string) error {
	return errors.New("bench: not yet wired")
}
