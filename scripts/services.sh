#!/usr/bin/env bash
# Makes sure the local servers the tests need answer (README.md, "Two
# commands": PostgreSQL on 5432 with wal_level = logical and 300 connections, MariaDB on 3306
# with its binlog on (ROW format, FULL row images and metadata),
# NATS JetStream on 4222, Redis on 6379, RabbitMQ on 5672, Mosquitto on 1883),
# starting any that is installed (Debian packages) but down, and waits for
# them. Idempotent. Exits non-zero, naming the server, when one cannot be
# brought up.
set -uo pipefail

answers() { # host port
	(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && exec 3>&- 3<&-
}

wait_for() { # name port seconds
	local i
	for ((i = 0; i < $3 * 5; i++)); do
		answers 127.0.0.1 "$2" && return 0
		sleep 0.2
	done
	echo "services: $1 does not answer on 127.0.0.1:$2 after $3 s" >&2
	return 1
}

ensure() { # name port start-command...
	local name=$1 port=$2
	shift 2
	if answers 127.0.0.1 "$port"; then
		echo "services: $name answers on $port"
		return 0
	fi
	echo "services: starting $name"
	"$@" >/dev/null 2>&1 || true
	wait_for "$name" "$port" 60 && echo "services: $name answers on $port"
}

status=0
ensure PostgreSQL 5432 pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql 2>/dev/null | head -1)" main start || status=1
ensure MariaDB 3306 start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || status=1
ensure "NATS JetStream" 4222 start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log || status=1
ensure Redis 6379 redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log || status=1
ensure RabbitMQ 5672 rabbitmq-server -detached || status=1
ensure Mosquitto 1883 mosquitto -d -c /etc/mosquitto/mosquitto.conf || status=1

# PostgreSQL logical replication (the pgcdc source) needs wal_level =
# logical; the default is replica. The tests run many relays and pools at
# once (torture, several relay processes per test), more than the default
# 100 connections leave room for: ask for 300. Set both once and restart
# the cluster (one restart), then wait until it answers again.
pg_settings() {
	local cluster level conns
	cluster=$(ls /etc/postgresql 2>/dev/null | head -1)
	level=$(psql -h 127.0.0.1 -U postgres -XAtc "SHOW wal_level" 2>/dev/null) &&
		conns=$(psql -h 127.0.0.1 -U postgres -XAtc "SHOW max_connections" 2>/dev/null) || {
		echo "services: PostgreSQL does not answer psql; cannot check wal_level" >&2
		return 1
	}
	if [ "$level" = logical ] && [ "$conns" -ge 300 ]; then
		echo "services: PostgreSQL wal_level is logical, max_connections $conns"
		return 0
	fi
	echo "services: setting PostgreSQL wal_level = logical (was $level), max_connections = 300 (was $conns) and restarting it"
	psql -h 127.0.0.1 -U postgres -XAtqc "ALTER SYSTEM SET wal_level = logical" || return 1
	[ "$conns" -ge 300 ] || psql -h 127.0.0.1 -U postgres -XAtqc "ALTER SYSTEM SET max_connections = 300" || return 1
	pg_ctlcluster --skip-systemctl-redirect "$cluster" main restart || return 1
	wait_for PostgreSQL 5432 60 || return 1
	local i
	for ((i = 0; i < 300; i++)); do
		level=$(psql -h 127.0.0.1 -U postgres -XAtc "SHOW wal_level" 2>/dev/null) && break
		sleep 0.2
	done
	if [ "$level" != logical ]; then
		echo "services: PostgreSQL wal_level is still '$level' after the restart" >&2
		return 1
	fi
	echo "services: PostgreSQL wal_level is logical"
}
pg_settings || status=1

# The pgcdc source streams over a replication connection (replication=
# database), which pg_hba.conf must allow for postgres over loopback. A
# logical replication connection matches the "all" database lines; add a
# trust line for it once if it is refused, then reload.
pg_replication() {
	if psql "host=127.0.0.1 user=postgres dbname=postgres replication=database" -XAtqc "IDENTIFY_SYSTEM" >/dev/null 2>&1; then
		echo "services: PostgreSQL accepts replication connections"
		return 0
	fi
	local hba
	hba=$(psql -h 127.0.0.1 -U postgres -XAtc "SHOW hba_file") || return 1
	echo "services: allowing loopback replication connections in $hba"
	grep -q '^host[[:space:]]\+all[[:space:]]\+postgres[[:space:]]\+127.0.0.1/32[[:space:]]\+trust' "$hba" ||
		sed -i '1i host all postgres 127.0.0.1/32 trust' "$hba" || return 1
	grep -q '^host[[:space:]]\+replication[[:space:]]\+postgres[[:space:]]\+127.0.0.1/32[[:space:]]\+trust' "$hba" ||
		sed -i '1i host replication postgres 127.0.0.1/32 trust' "$hba" || return 1
	psql -h 127.0.0.1 -U postgres -XAtqc "SELECT pg_reload_conf()" >/dev/null || return 1
	sleep 0.5
	psql "host=127.0.0.1 user=postgres dbname=postgres replication=database" -XAtqc "IDENTIFY_SYSTEM" >/dev/null 2>&1 || {
		echo "services: PostgreSQL still refuses replication connections; check $hba" >&2
		return 1
	}
	echo "services: PostgreSQL accepts replication connections"
}
pg_replication || status=1
# The binlog source (source/binlog) tails MariaDB's binary log, which must
# be on, row-based with full row images and column names. Add each setting
# under [mysqld] in /etc/mysql/my.cnf when missing; then, if the running
# server's settings differ, restart it once (clean shutdown, start, wait
# until it answers). Left running as it is when anything fails.
mariadb_binlog() {
	local cnf=/etc/mysql/my.cnf key line want got
	local -a settings=(
		"log_bin=mariadb-bin"
		"server_id=1"
		"binlog_format=ROW"
		"binlog_row_image=FULL"
		"binlog_row_metadata=FULL"
		"binlog_expire_logs_seconds=86400"
	)
	[ -w "$cnf" ] && grep -q '^\[mysqld\]' "$cnf" || {
		echo "services: $cnf has no [mysqld] section to enable MariaDB's binlog in" >&2
		return 1
	}
	for line in "${settings[@]}"; do
		key=${line%%=*}
		grep -Eq "^[[:space:]]*(${key}|${key//_/-})[[:space:]]*(=|$)" "$cnf" && continue
		echo "services: adding $line to $cnf"
		sed -i "/^\[mysqld\]/a $line" "$cnf" || return 1
	done
	want="log_bin=ON server_id=1 binlog_format=ROW binlog_row_image=FULL binlog_row_metadata=FULL binlog_expire_logs_seconds=86400"
	got=$(mariadb_binlog_settings) || {
		echo "services: MariaDB does not answer; cannot check its binlog settings" >&2
		return 1
	}
	if [ "$got" = "$want" ]; then
		echo "services: MariaDB binlog is on (ROW, FULL images and metadata)"
		return 0
	fi
	echo "services: restarting MariaDB to enable its binlog (was: $got)"
	mariadb-admin -uroot shutdown || return 1
	local i
	for ((i = 0; i < 300; i++)); do
		pgrep -x mariadbd >/dev/null || break
		sleep 0.2
	done
	start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd >/dev/null 2>&1 || return 1
	for ((i = 0; i < 300; i++)); do
		mariadb -uroot -e 'select 1' >/dev/null 2>&1 && break
		sleep 0.2
	done
	got=$(mariadb_binlog_settings) || {
		echo "services: MariaDB does not answer after the restart" >&2
		return 1
	}
	if [ "$got" != "$want" ]; then
		echo "services: MariaDB binlog settings are '$got' after the restart, want '$want'" >&2
		return 1
	fi
	echo "services: MariaDB binlog is on (ROW, FULL images and metadata)"
}

# Prints the running server's binlog settings as name=value words, in the
# order mariadb_binlog compares them.
mariadb_binlog_settings() {
	mariadb -uroot -N -B -e "SELECT CONCAT_WS(' ',
		CONCAT('log_bin=', IF(@@log_bin, 'ON', 'OFF')),
		CONCAT('server_id=', @@server_id),
		CONCAT('binlog_format=', @@global.binlog_format),
		CONCAT('binlog_row_image=', @@global.binlog_row_image),
		CONCAT('binlog_row_metadata=', @@global.binlog_row_metadata),
		CONCAT('binlog_expire_logs_seconds=', @@global.binlog_expire_logs_seconds))" 2>/dev/null
}
mariadb_binlog || status=1
exit $status
