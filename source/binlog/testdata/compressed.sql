-- Writes to binlog_capture with MariaDB's binlog compression on
-- (log_bin_compress, zlib; events of 256 bytes or more are compressed).
-- Captured into compressed.bin by: go test ./source/binlog -run TestCaptured -capture
SET GLOBAL log_bin_compress = ON
INSERT INTO binlog_capture (event_id, topic, event_type, payload) VALUES ('0b6f3c4e-8a61-4a9e-9d2f-2f1c6c1f0c01', 'orders', 'Compressed', REPEAT('compressible payload ', 40))
SET SESSION binlog_format = 'STATEMENT'
INSERT INTO binlog_capture (event_id, topic, event_type, payload) VALUES ('0b6f3c4e-8a61-4a9e-9d2f-2f1c6c1f0c02', 'orders', 'CompressedStatement', 'a statement long enough to be compressed: a statement long enough to be compressed: a statement long enough to be compressed: a statement long enough to be compressed: a statement long enough to be compressed')
SET SESSION binlog_format = 'ROW'
SET GLOBAL log_bin_compress = OFF
