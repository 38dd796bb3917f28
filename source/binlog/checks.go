package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// check refuses to start, with one line naming the fix, when the server
// cannot serve the source: binlog off or not row-based with full images,
// no server_id, missing replication grants, or a server that cannot give
// a read of the table its binlog position (MySQL: see the package doc).
// It warns when column names are not logged.
func (s *Source) check(ctx context.Context) error {
	var version, format, image, metadata, checksum, schema sql.NullString
	var logBin, serverID sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT @@version, @@log_bin, @@global.binlog_format, @@global.binlog_row_image,
	@@global.binlog_row_metadata, @@global.binlog_checksum, @@server_id, DATABASE()`).
		Scan(&version, &logBin, &format, &image, &metadata, &checksum, &serverID, &schema)
	if err != nil {
		if strings.Contains(err.Error(), "binlog_row_metadata") {
			return errors.New("binlog: the server has no binlog_row_metadata setting: use MariaDB 10.5 or later")
		}
		return fmt.Errorf("binlog: reading the server's binlog settings: %w", err)
	}
	st := settings{Version: version.String, LogBin: logBin.Int64 == 1, Format: format.String, Image: image.String,
		Metadata: metadata.String, Checksum: checksum.String, ServerID: serverID.Int64}
	if err := st.check(); err != nil {
		return err
	}
	s.checksum = strings.EqualFold(checksum.String, "CRC32")
	if !strings.EqualFold(metadata.String, "FULL") {
		s.log.Warn("outbox binlog: binlog_row_metadata is not FULL, so the binlog carries no column names: the source maps columns by the table's current definition and reads the table again after each change of it; SET GLOBAL binlog_row_metadata = 'FULL' to map them by name", "binlog_row_metadata", metadata.String)
	}
	if s.n.schema == "" {
		if !schema.Valid || schema.String == "" {
			return errors.New("binlog: the connection has no database: name one in the DSN or set Config.Schema")
		}
		s.n.schema = schema.String
	}
	return s.checkGrants(ctx)
}

// checkGrants refuses a user without REPLICATION SLAVE and REPLICATION
// CLIENT (BINLOG MONITOR since MariaDB 10.5) on *.*.
func (s *Source) checkGrants(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, "SHOW GRANTS")
	if err != nil {
		return fmt.Errorf("binlog: reading the user's grants: %w", err)
	}
	defer rows.Close()
	var all, slave, client bool
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return fmt.Errorf("binlog: reading the user's grants: %w", err)
		}
		g = strings.ToUpper(g)
		if !strings.Contains(g, " ON *.* TO ") {
			continue
		}
		all = all || strings.HasPrefix(g, "GRANT ALL PRIVILEGES ON")
		slave = slave || strings.Contains(g, "REPLICATION SLAVE")
		client = client || strings.Contains(g, "REPLICATION CLIENT") || strings.Contains(g, "BINLOG MONITOR")
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("binlog: reading the user's grants: %w", err)
	}
	if all || slave && client {
		return nil
	}
	return fmt.Errorf("binlog: the user %q lacks the replication grants: GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO the user", s.dial.User)
}

// settings are the server's binlog settings the source depends on.
type settings struct {
	Version                           string
	LogBin                            bool
	Format, Image, Metadata, Checksum string
	ServerID                          int64
}

// check refuses settings the source cannot work with, in one line naming
// the fix.
func (st settings) check() error {
	if !strings.Contains(st.Version, "MariaDB") {
		return fmt.Errorf("binlog: the server is %s; the binlog source needs MariaDB 10.5+ (its consistent-snapshot binlog position makes the fallback read exact); use --source poll on MySQL", st.Version)
	}
	switch {
	case !st.LogBin:
		return errors.New("binlog: the server's binary log is off: set log_bin in the [mysqld] section of its configuration and restart it")
	case !strings.EqualFold(st.Format, "ROW"):
		return fmt.Errorf("binlog: binlog_format is %s: SET GLOBAL binlog_format = 'ROW' and set binlog_format=ROW in the server's configuration", st.Format)
	case !strings.EqualFold(st.Image, "FULL"):
		return fmt.Errorf("binlog: binlog_row_image is %s: SET GLOBAL binlog_row_image = 'FULL' and set binlog_row_image=FULL in the server's configuration", st.Image)
	case st.ServerID == 0:
		return errors.New("binlog: the server's server_id is 0: set server_id (any number unique among your servers) in its configuration")
	case !strings.EqualFold(st.Checksum, "CRC32") && !strings.EqualFold(st.Checksum, "NONE"):
		return fmt.Errorf("binlog: binlog_checksum is %s; the source reads CRC32 or NONE: SET GLOBAL binlog_checksum = 'CRC32'", st.Checksum)
	}
	return nil
}
