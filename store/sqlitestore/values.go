package sqlitestore

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/outbox-go/outbox/store/driver"
)

// SQLite's type affinity keeps what a producer wrote where an INTEGER
// column cannot convert it: text ('infinity', '2024-01-01'), a real that
// is not a whole number or is out of range (1e300), or a blob. The claim
// and the reads scan the bookkeeping columns as they are stored and judge
// them here, so one such row never fails a read of others.

// integer reads an INTEGER column of the table contract: an integer, or
// a BadRow error naming column and what it holds.
func integer(column string, v any, min, max int64) (int64, error) {
	switch x := v.(type) {
	case int64:
		if x >= min && x <= max {
			return x, nil
		}
		return 0, driver.BadRow("%s is %d: use a value from %d to %d", column, x, min, max)
	case float64:
		if x == math.Trunc(x) && x >= float64(min) && x <= float64(max) {
			return int64(x), nil
		}
	}
	hint := "a whole number"
	if strings.HasSuffix(column, "_at") || strings.HasSuffix(column, "_until") {
		hint = "microseconds since 1970 UTC"
	}
	return 0, driver.BadRow("%s is not an integer: it holds %s; write an integer (%s)", column, describe(v), hint)
}

// describe names a value SQLite returned, for a one-line reason.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		return fmt.Sprintf("the text %q", clipped(x))
	case []byte:
		return fmt.Sprintf("a blob of %d bytes", len(x))
	case float64:
		return fmt.Sprintf("the real %g", x)
	}
	return fmt.Sprintf("%v", v)
}

func clipped(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// looseMicros is a time column for an operator's read: the time, or the
// zero time when the column holds no integer.
func looseMicros(v any) time.Time {
	if us, ok := v.(int64); ok {
		return micros(us)
	}
	return time.Time{}
}

// looseInt is an integer column for an operator's read: the value, or 0
// when the column holds no integer.
func looseInt(v any) int {
	if n, ok := v.(int64); ok {
		return int(n)
	}
	return 0
}
