package sqlitestore

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/outbox-go/outbox/store/driver"
)

// TestIntegerReason: the reason a row is buried for names its column and
// gives the hint that fits it: times in microseconds for a time column,
// not for attempts.
func TestIntegerReason(t *testing.T) {
	for _, c := range []struct {
		column string
		v      any
		want   string
		not    string
	}{
		{"created_at", "infinity", `created_at is not an integer: it holds the text "infinity"; write an integer (microseconds since 1970 UTC)`, ""},
		{"created_at", 1e300, "it holds the real 1e+300; write an integer (microseconds since 1970 UTC)", ""},
		{"attempts", 1.5, "attempts is not an integer: it holds the real 1.5; write an integer (a whole number)", "microseconds"},
	} {
		_, err := integer(c.column, c.v, math.MinInt64, math.MaxInt64)
		if !errors.Is(err, driver.ErrBadRow) || !strings.Contains(err.Error(), c.want) || (c.not != "" && strings.Contains(err.Error(), c.not)) {
			t.Errorf("integer(%q, %v): %v; want a bad row saying %q", c.column, c.v, err, c.want)
		}
	}
	if n, err := integer("attempts", 3.0, 0, 10); n != 3 || err != nil {
		t.Errorf("integer(attempts, 3.0) = %d, %v; want 3", n, err)
	}
}
