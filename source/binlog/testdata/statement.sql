-- A session writing the outbox table binlog_capture in statement format:
-- the INSERT arrives as a query event, which makes the source fall back to
-- the table. Captured into statement.bin by: go test ./source/binlog -run TestCaptured -capture
SET SESSION binlog_format = 'STATEMENT'
INSERT INTO binlog_capture (event_id, topic, event_type, payload) VALUES ('0b6f3c4e-8a61-4a9e-9d2f-2f1c6c1f0b01', 'orders', 'Statement', 'y')
SET SESSION binlog_format = 'ROW'
ALTER TABLE binlog_capture ADD COLUMN extra INT NULL
INSERT INTO binlog_capture (event_id, topic, event_type, payload, extra) VALUES ('0b6f3c4e-8a61-4a9e-9d2f-2f1c6c1f0b02', 'orders', 'AfterAlter', 'z', 7)
FLUSH BINARY LOGS
INSERT INTO binlog_capture (event_id, topic, event_type, payload) VALUES ('0b6f3c4e-8a61-4a9e-9d2f-2f1c6c1f0b03', 'orders', 'AfterFlush', 'w')
