package pgcdc

import outbox "github.com/outbox-go/outbox"

// SetPushHook has h see each streamed transaction's events when the source
// buffers them; nil removes it. For benchmarks.
func SetPushHook(h func([]outbox.Event)) {
	if h == nil {
		pushHook.Store(nil)
		return
	}
	pushHook.Store(&h)
}

// MarkSlotLost makes the next ensureSlot of slot see it invalidated
// (wal_status lost), once, as the server reports a slot whose WAL it
// removed past max_slot_wal_keep_size. For tests.
func MarkSlotLost(slot string) {
	done := false
	h := func(name string, si *slotInfo) {
		if name == slot && si.exists && !done {
			si.walStatus = "lost"
			done = true
		}
	}
	slotInfoHook.Store(&h)
}

// ClearSlotHook removes MarkSlotLost's hook.
func ClearSlotHook() { slotInfoHook.Store(nil) }
