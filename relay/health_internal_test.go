package relay

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

type recordLog struct{ lines []string }

func (l *recordLog) Warn(msg string, args ...any) {
	l.lines = append(l.lines, fmt.Sprint(append([]any{msg}, args...)...))
}
func (l *recordLog) Info(msg string, args ...any) { l.lines = append(l.lines, msg) }

// A component that keeps failing is logged once when it starts failing;
// when its error changes (a closed connection, then the reconnect refused
// for its credentials) the new reason is logged too, at most once per
// changeLogEvery, and becomes the state's error.
func TestHealthLogsAChangedReason(t *testing.T) {
	log := &recordLog{}
	h := &health{log: log}
	h.broker.name = "broker"
	h.set(&h.broker, errors.New("connection closed"))
	h.set(&h.broker, errors.New("connection closed"))
	h.set(&h.broker, errors.New("credentials refused")) // within changeLogEvery: not logged yet
	if len(log.lines) != 1 || h.broker.err != "connection closed" {
		t.Fatalf("after the first failure and a quick change: %q, state %q", log.lines, h.broker.err)
	}
	h.broker.logged = time.Now().Add(-changeLogEvery)
	h.set(&h.broker, errors.New("credentials refused"))
	h.set(&h.broker, errors.New("credentials refused"))
	if len(log.lines) != 2 || !strings.Contains(log.lines[1], "still failing, now differently") || !strings.Contains(log.lines[1], "credentials refused") || h.broker.err != "credentials refused" {
		t.Fatalf("after the change: %q, state %q", log.lines, h.broker.err)
	}
	h.set(&h.broker, nil)
	if len(log.lines) != 3 || log.lines[2] != "relay: broker recovered" || h.broker.err != "" {
		t.Fatalf("after recovery: %q", log.lines)
	}
}
