package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/broker"
)

func TestGateWaitsForCallsInProgress(t *testing.T) {
	var g broker.Gate
	if !g.Enter() {
		t.Fatal("a zero Gate refused a call")
	}
	released := make(chan struct{})
	closed := make(chan error, 1)
	go func() {
		closed <- g.Close(context.Background(), "x: closing", func() error { close(released); return nil })
	}()
	select {
	case <-released:
		t.Fatal("Close released the client while a call was in progress")
	case <-time.After(50 * time.Millisecond):
	}
	if g.Enter() {
		t.Fatal("Enter admitted a call after Close began")
	}
	if !g.Closed() {
		t.Fatal("Closed is false after Close began")
	}
	g.Leave()
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	<-released
	// A second Close returns at once, with nothing to report.
	if err := g.Close(context.Background(), "x: closing", func() error { t.Error("release ran twice"); return nil }); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestGateCloseGivesUpWithCtx(t *testing.T) {
	var g broker.Gate
	g.Enter()
	defer g.Leave()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	ran := false
	err := g.Close(ctx, "x: closing with publishes still waiting", func() error { ran = true; return errors.New("release failed") })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "x: closing with publishes still waiting") {
		t.Fatalf("Close = %v, want the waiting message and the deadline", err)
	}
	if !ran {
		t.Fatal("release did not run after ctx ended")
	}
}

func TestGateSecondCloseWaitsForTheFirst(t *testing.T) {
	var g broker.Gate
	g.Enter()
	first := make(chan struct{})
	go func() {
		_ = g.Close(context.Background(), "x", nil)
		close(first)
	}()
	for !g.Closed() {
		time.Sleep(time.Millisecond)
	}
	second := make(chan struct{})
	go func() {
		_ = g.Close(context.Background(), "x", nil)
		close(second)
	}()
	select {
	case <-second:
		t.Fatal("the second Close returned before the first finished")
	case <-time.After(30 * time.Millisecond):
	}
	g.Leave()
	<-first
	<-second
}
