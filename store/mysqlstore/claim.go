package mysqlstore

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
)

// Columns as read back. Times are read as UNIX_TIMESTAMP(column): for a
// TIMESTAMP column that is its stored UTC value, whatever the session's
// time_zone and the driver's parseTime/loc.
var eventCols = []string{"id", "event_id", "topic", "event_key", "event_type", "aggregate_type", "schema_version", "payload", "content_type", "headers", "attempts", "UNIX_TIMESTAMP(%screated_at)"}
var recordCols = append(eventCols[:len(eventCols):len(eventCols)], "status", "last_error", "UNIX_TIMESTAMP(%snext_attempt_at)", "lease_owner", "UNIX_TIMESTAMP(%slease_until)", "UNIX_TIMESTAMP(%ssent_at)")

func cols(list []string, prefix string) string {
	out := make([]string, len(list))
	for i, c := range list {
		if strings.Contains(c, "%s") {
			out[i] = fmt.Sprintf(c, prefix)
		} else {
			out[i] = prefix + c
		}
	}
	return strings.Join(out, ", ")
}

// dbNow is the database clock in microseconds since the epoch. UNIX_TIMESTAMP()
// and NOW(6) both read the statement's start time; neither depends on the
// session's time zone (MICROSECOND of a local time equals that of UTC).
const dbNow = "UNIX_TIMESTAMP() * 1000000 + MICROSECOND(NOW(6))"

// leaseExpired is the SQL of "the lease of SENDING row p ran out" at
// NOW(6): its lease_until has passed, or it has none (a plain-SQL
// producer that sets the status writes no lease). On
// (busy, lease_until) it is one range per shard: InnoDB sorts NULL first.
func leaseExpired(p string) string {
	return "(" + p + "lease_until IS NULL OR " + p + "lease_until <= NOW(6))"
}

// forceHoldIdx is the hint that makes a query use the hold index, which
// leads with status and so also finds the in-flight rows.
func (s *Store) forceHoldIdx() string { return " FORCE INDEX (" + s.opts.Table + "_hold_idx)" }

type scanner interface{ Scan(dest ...any) error }

// scanEvent reads one row into e. broken is why the row breaks the table
// contract (its headers cannot be decoded; e.Headers is then nil): the row
// was read, and the caller decides what to do with it.
func scanEvent(row scanner, e *outbox.Event, extra ...any) (broken, err error) {
	var headers []byte
	var created sql.NullString
	dest := append([]any{&e.ID, &e.EventID, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.SchemaVersion, &e.Payload, &e.ContentType, &headers, &e.Attempts, &created}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if e.CreatedAt, err = epoch(created); err != nil {
		return nil, err
	}
	if e.Payload == nil {
		e.Payload = []byte{}
	}
	e.Headers, broken = driver.DecodeHeaders(headers)
	return broken, nil
}

// epoch parses UNIX_TIMESTAMP's decimal text ("1700000000.123456"); NULL and
// 0 (MySQL's zero timestamp) are the zero time.
func epoch(v sql.NullString) (time.Time, error) {
	if !v.Valid {
		return time.Time{}, nil
	}
	secText, frac, _ := strings.Cut(v.String, ".")
	sec, err := strconv.ParseInt(secText, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("mysqlstore: bad timestamp %q", v.String)
	}
	var nsec int64
	if frac != "" {
		frac = (frac + "000000000")[:9]
		if nsec, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, fmt.Errorf("mysqlstore: bad timestamp %q", v.String)
		}
	}
	if sec == 0 && nsec == 0 {
		return time.Time{}, nil
	}
	return time.Unix(sec, nsec), nil
}
