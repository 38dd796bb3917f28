-- Row-format writes to the outbox table binlog_capture (created by
-- mysqlstore's Migrate), as a producer and the relay write them. Captured
-- into rows.bin by: go test ./source/binlog -run TestCaptured -capture
BEGIN
INSERT INTO binlog_capture (event_id, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers, created_at, next_attempt_at) VALUES ('0b6f3c4e-8a61-4a9e-9d2f-2f1c6c1f0a01', 'orders', 'order-1', 'OrderPlaced', 'order', 2, X'7b226964223a317d00ff', 'application/json', '{"traceparent": "00-abc-def-01", "tenant": "acme"}', '2026-12-03 08:30:01.123456', '2026-12-03 08:30:01.123456')
INSERT INTO binlog_capture (event_id, topic, event_key, event_type, payload, created_at, next_attempt_at) VALUES ('0b6f3c4e-8a61-4a9e-9d2f-2f1c6c1f0a02', 'orders', '', 'OrderPaid', '', '2026-12-03 08:30:02.000001', '2026-12-03 08:31:00.5')
COMMIT
BEGIN
INSERT INTO binlog_capture (event_id, topic, event_type, payload) VALUES ('0b6f3c4e-8a61-4a9e-9d2f-2f1c6c1f0a03', 'orders', 'RolledBack', 'x')
ROLLBACK
UPDATE binlog_capture SET status = 'DEAD', last_error = 'gave up' WHERE event_id = '0b6f3c4e-8a61-4a9e-9d2f-2f1c6c1f0a02'
UPDATE binlog_capture SET status = 'NEW', last_error = '' WHERE event_id = '0b6f3c4e-8a61-4a9e-9d2f-2f1c6c1f0a02'
DELETE FROM binlog_capture WHERE event_id = '0b6f3c4e-8a61-4a9e-9d2f-2f1c6c1f0a01'
