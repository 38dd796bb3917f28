package store

import (
	"context"
	"fmt"
	"io"
)

// PreviewBytes is how much of a payload ListDead returns: what a list or
// a preview shows. The whole payload (a DEAD event is often one that was
// too large for the broker) is read by Get, or streamed by CopyPayload.
const PreviewBytes = 4096

// PayloadReader is an optional ability of a store: a payload read in
// pieces, so a large one is never held whole.
type PayloadReader interface {
	// ReadPayload returns at most n bytes of event id's payload from
	// byte offset on (from the outbox, else the archive); fewer at its
	// end. ErrNotFound when no event has that id.
	ReadPayload(ctx context.Context, id int64, offset, n int) ([]byte, error)
}

// copyChunk is the piece CopyPayload reads at a time.
const copyChunk = 1 << 20

// CopyPayload writes event id's payload, size bytes long (Record.PayloadSize),
// to w in pieces of 1 MiB, through the store's PayloadReader; a store
// without one is read whole with Get.
func CopyPayload(ctx context.Context, st Store, id int64, size int, w io.Writer) error {
	pr, ok := st.(PayloadReader)
	if !ok {
		r, err := st.Get(ctx, id)
		if err != nil {
			return err
		}
		_, err = w.Write(r.Payload)
		return err
	}
	for off := 0; off < size; {
		b, err := pr.ReadPayload(ctx, id, off, min(copyChunk, size-off))
		if err != nil {
			return err
		}
		if len(b) == 0 {
			return fmt.Errorf("store: event %d: its payload ends at byte %d of %d (it changed while read)", id, off, size)
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		off += len(b)
	}
	return nil
}
