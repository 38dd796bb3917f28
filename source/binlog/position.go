package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-go/outbox/source"
)

// <table>_binlog holds one row: the streaming lease (owner, a fencing
// epoch that grows with every change of hands, an expiry on the database
// clock) and the resume position (the binlog file and offset after the
// last transaction whose events are all settled, and the GTID position
// there). A process streams only while it holds the lease; every write it
// makes (deleting delivered rows, burying, saving the position) locks the
// row and checks owner and epoch in the same transaction before it
// commits, so a process whose lease was taken over changes nothing.

const stateRow = "binlog"

// resume is a place in the binlog to stream from.
type resume struct {
	File string
	Pos  uint32
	GTID string // MariaDB's GTID position there ("" when unknown)
}

func (r resume) from() dumpFrom { return dumpFrom{GTID: r.GTID, File: r.File, Pos: r.Pos} }

func (s *Source) createState(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+s.n.state+` (
	stream      VARCHAR(16)  NOT NULL,
	owner       VARCHAR(64)  NOT NULL DEFAULT '',
	epoch       BIGINT       NOT NULL DEFAULT 0,
	lease_until TIMESTAMP(6) NULL DEFAULT NULL,
	file        VARCHAR(255) NOT NULL DEFAULT '',
	pos         BIGINT       NOT NULL DEFAULT 0,
	gtid        TEXT         NOT NULL DEFAULT (''),
	saved_at    TIMESTAMP(6) NULL DEFAULT NULL,
	PRIMARY KEY (stream)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`)
	if err != nil {
		return fmt.Errorf("binlog: creating %s: %w", s.n.state, err)
	}
	if _, err := s.db.ExecContext(ctx, "INSERT IGNORE INTO "+s.n.state+" (stream) VALUES (?)", stateRow); err != nil {
		return fmt.Errorf("binlog: creating the row of %s: %w", s.n.state, err)
	}
	return nil
}

// acquireLease waits until this process holds the lease, and returns the
// saved resume position (nil when none was saved).
func (s *Source) acquireLease(ctx context.Context) (*resume, error) {
	logged := false
	for {
		r, held, err := s.tryLease(ctx)
		switch {
		case err == nil && held:
			s.log.Info("outbox binlog: holding the streaming lease", "table", s.cfg.Table, "owner", s.cfg.Owner, "epoch", s.epoch)
			return r, nil
		case err == nil:
			if !logged {
				s.log.Info("outbox binlog: another process streams this table; waiting to take over when its lease expires", "table", s.cfg.Table)
				logged = true
			}
		case ctx.Err() != nil:
			return nil, ctx.Err()
		default:
			s.log.Warn("outbox binlog: taking the streaming lease failed; retrying", "table", s.cfg.Table, "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(s.cfg.LeaseFor / 4):
		}
	}
}

func (s *Source) tryLease(ctx context.Context) (*resume, bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, false, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit a no-op
	var epoch, pos int64
	var free bool
	var file, gtid string
	err = tx.QueryRowContext(ctx, "SELECT epoch, lease_until IS NULL OR lease_until < NOW(6), file, pos, gtid FROM "+s.n.state+" WHERE stream = ? FOR UPDATE", stateRow).
		Scan(&epoch, &free, &file, &pos, &gtid)
	if err != nil {
		return nil, false, err
	}
	if !free {
		return nil, false, nil
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+s.n.state+" SET owner = ?, epoch = ?, lease_until = NOW(6) + INTERVAL ? MICROSECOND WHERE stream = ?",
		s.cfg.Owner, epoch+1, s.cfg.LeaseFor.Microseconds(), stateRow); err != nil {
		return nil, false, err
	}
	if err := tx.Commit(); err != nil {
		return nil, false, err
	}
	s.epoch = epoch + 1
	if file == "" {
		return nil, true, nil
	}
	return &resume{File: file, Pos: uint32(pos), GTID: gtid}, true, nil
}

// renewLease renews the lease every third of LeaseFor. A renewal may take
// until shortly before the lease would expire (commits stall under load,
// or while the server rotates its binlog). When the lease is gone
// (another process took it) or cannot be renewed before it expires, the
// source fails with source.ErrFenced and stops streaming.
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
		rctx, cancel := context.WithDeadline(ctx, validUntil.Add(-s.cfg.LeaseFor/10))
		// owner and epoch, not the expiry: a renewal that comes late
		// keeps a lease nobody took over; a takeover changes the epoch
		res, err := s.db.ExecContext(rctx, "UPDATE "+s.n.state+" SET lease_until = NOW(6) + INTERVAL ? MICROSECOND WHERE stream = ? AND owner = ? AND epoch = ?",
			s.cfg.LeaseFor.Microseconds(), stateRow, s.cfg.Owner, s.epoch)
		cancel()
		var n int64
		if err == nil {
			n, err = res.RowsAffected()
		}
		switch {
		case err == nil && n == 1:
			validUntil = sent.Add(s.cfg.LeaseFor)
		case err == nil:
			s.log.Error("outbox binlog: the streaming lease was taken over; stopping", "table", s.cfg.Table, "epoch", s.epoch)
			s.fail(source.ErrFenced)
			s.cancel()
			return
		case ctx.Err() != nil:
			return
		case time.Now().After(validUntil.Add(-s.cfg.LeaseFor / 10)):
			s.log.Error("outbox binlog: could not renew the streaming lease before it expires; stopping", "table", s.cfg.Table, "error", err.Error())
			s.fail(source.ErrFenced)
			s.cancel()
			return
		default:
			s.log.Warn("outbox binlog: renewing the streaming lease failed; retrying", "error", err.Error())
		}
	}
}

// releaseLease gives the lease up so that a successor need not wait.
func (s *Source) releaseLease() {
	if s.epoch == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = s.db.ExecContext(ctx, "UPDATE "+s.n.state+" SET lease_until = NULL WHERE stream = ? AND owner = ? AND epoch = ?", stateRow, s.cfg.Owner, s.epoch)
}

// fenced runs fn in a transaction that, before it commits, locks the
// lease row and checks that this process still holds it (its owner and
// epoch: a takeover changes the epoch, and a lease released by Close has
// no expiry); when it does not, the transaction is rolled back and the
// error is source.ErrFenced. A lease that expired while nobody took it
// over is still this process's: its writes are safe, since a takeover
// locks the row too and so waits for the commit, or is seen by the check.
// The row is locked last, so that renewals wait only for the commit, not
// for fn's writes.
func (s *Source) fenced(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit a no-op
	if err := fn(tx); err != nil {
		return err
	}
	var held bool
	err = tx.QueryRowContext(ctx, "SELECT lease_until IS NOT NULL FROM "+s.n.state+" WHERE stream = ? AND owner = ? AND epoch = ? FOR UPDATE",
		stateRow, s.cfg.Owner, s.epoch).Scan(&held)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !held {
		s.fail(source.ErrFenced)
		return source.ErrFenced
	}
	if err != nil {
		return err
	}
	return tx.Commit()
}

// savePosition writes r as the resume position, inside a fenced
// transaction.
func (s *Source) savePosition(ctx context.Context, tx *sql.Tx, r resume) error {
	_, err := tx.ExecContext(ctx, "UPDATE "+s.n.state+" SET file = ?, pos = ?, gtid = ?, saved_at = NOW(6) WHERE stream = ?", r.File, r.Pos, r.GTID, stateRow)
	return err
}
