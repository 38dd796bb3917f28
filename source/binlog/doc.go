// Package binlog is a MySQL/MariaDB binlog source.
package binlog
