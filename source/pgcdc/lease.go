package pgcdc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-go/outbox/source"
)

// One streamer at a time. The lease is a row of <table>_cdc per slot:
// owner, a fencing epoch that grows with every change of hands, and an
// expiry on the database clock. A process streams only while it holds the
// lease; every write it makes (deleting delivered rows, burying) first
// locks the row and checks (owner, epoch, expiry), so a process that
// stalled past its lease and wakes up changes nothing. PostgreSQL lets one
// connection at a time stream a slot; a new holder terminates the old
// holder's walsender if it still has one (a stalled process), so the old
// one cannot confirm a flush position either.

// acquireLease waits until this process holds the lease.
func (s *Source) acquireLease(ctx context.Context) error {
	logged := false
	for {
		var epoch int64
		err := s.pool.QueryRow(ctx, `INSERT INTO `+s.n.state+` AS l (slot, owner, epoch, lease_until)
VALUES ($1, $2, 1, now() + $3 * interval '1 millisecond')
ON CONFLICT (slot) DO UPDATE SET owner = excluded.owner, epoch = l.epoch + 1, lease_until = excluded.lease_until
WHERE l.lease_until IS NULL OR l.lease_until < now()
RETURNING l.epoch`, s.cfg.Slot, s.cfg.Owner, s.cfg.LeaseFor.Milliseconds()).Scan(&epoch)
		switch {
		case err == nil:
			s.epoch = epoch
			s.log.Info("outbox cdc: holding the streaming lease", "slot", s.cfg.Slot, "owner", s.cfg.Owner, "epoch", epoch)
			return nil
		case errors.Is(err, pgx.ErrNoRows):
			if !logged {
				var owner string
				var until time.Time
				_ = s.pool.QueryRow(ctx, "SELECT owner, lease_until FROM "+s.n.state+" WHERE slot = $1", s.cfg.Slot).Scan(&owner, &until)
				s.log.Info("outbox cdc: another process streams this slot; waiting to take over when its lease expires", "slot", s.cfg.Slot, "holder", owner, "until", until)
				logged = true
			}
		default:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !transient(err) {
				return fmt.Errorf("pgcdc: taking the streaming lease: %w", err)
			}
			// a connection ended under it (the server restarted, an
			// administrator terminated the session): waiting goes on
			s.log.Warn("outbox cdc: taking the streaming lease failed; retrying", "slot", s.cfg.Slot, "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.cfg.LeaseFor / 4):
		}
	}
}

// transient reports whether err is a lost connection or a server going
// away (SQLSTATE classes 08 and 57), which a retry on a new connection can
// cure.
func transient(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57")
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || pgconn.SafeToRetry(err)
}

// renewLease renews the lease every third of LeaseFor. When the lease is
// gone (another process took it) or cannot be renewed before it expires,
// the source fails with source.ErrFenced and stops streaming.
func (s *Source) renewLease(ctx context.Context) {
	every := s.cfg.LeaseFor / 3
	validUntil := time.Now().Add(s.cfg.LeaseFor)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, every)
		tag, err := s.pool.Exec(rctx, `UPDATE `+s.n.state+` SET lease_until = now() + $4 * interval '1 millisecond'
WHERE slot = $1 AND owner = $2 AND epoch = $3 AND lease_until > now()`, s.cfg.Slot, s.cfg.Owner, s.epoch, s.cfg.LeaseFor.Milliseconds())
		cancel()
		switch {
		case err == nil && tag.RowsAffected() == 1:
			validUntil = sent.Add(s.cfg.LeaseFor)
		case err == nil:
			s.log.Error("outbox cdc: the streaming lease was taken over; stopping", "slot", s.cfg.Slot, "epoch", s.epoch)
			s.fail(source.ErrFenced)
			s.cancel()
			return
		case ctx.Err() != nil:
			return
		case time.Now().After(validUntil.Add(-every / 2)):
			s.log.Error("outbox cdc: could not renew the streaming lease before it expires; stopping", "slot", s.cfg.Slot, "error", err.Error())
			s.fail(source.ErrFenced)
			s.cancel()
			return
		default:
			s.log.Warn("outbox cdc: renewing the streaming lease failed; retrying", "error", err.Error())
		}
	}
}
