package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/outbox-go/outbox/internal/faultproxy"
)

// echo serves lines back.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func TestProxyFaults(t *testing.T) {
	p, err := faultproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	roundTrip := func(c net.Conn, r *bufio.Reader, line string, within time.Duration) (time.Duration, error) {
		start := time.Now()
		_ = c.SetDeadline(start.Add(within))
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			return 0, err
		}
		got, err := r.ReadString('\n')
		if err == nil && got != line+"\n" {
			err = errors.New("echoed " + got)
		}
		return time.Since(start), err
	}

	c, r := dial()
	if _, err := roundTrip(c, r, "hello", time.Second); err != nil {
		t.Fatalf("plain forwarding: %v", err)
	}

	p.SetLatency(100 * time.Millisecond)
	if d, err := roundTrip(c, r, "slow", 2*time.Second); err != nil || d < 200*time.Millisecond {
		t.Fatalf("latency: took %s, %v; want ≥ 200ms (both ways)", d, err)
	}
	p.SetLatency(0)

	p.Pause()
	if _, err := roundTrip(c, r, "held", 200*time.Millisecond); err == nil {
		t.Fatal("a paused proxy forwarded")
	}
	p.Resume()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after resume the held bytes must arrive: %q %v", got, err)
	}

	if n := p.ResetAll(); n != 1 {
		t.Fatalf("ResetAll reset %d connections, want 1", n)
	}
	if _, err := roundTrip(c, r, "gone", time.Second); err == nil {
		t.Fatal("a reset connection still works")
	}

	c2, r2 := dial()
	p.ResetAfter([]byte("PUB "))
	if _, err := roundTrip(c2, r2, "SUB x", time.Second); err != nil {
		t.Fatalf("a non-matching chunk must pass: %v", err)
	}
	if _, err := roundTrip(c2, r2, "HPUB x 1", time.Second); err == nil {
		t.Fatal("the connection must be reset right after forwarding a matching chunk")
	}
	p.ResetAfter(nil)
	c3, r3 := dial()
	if _, err := roundTrip(c3, r3, "PUB y", time.Second); err != nil {
		t.Fatalf("disarmed: %v", err)
	}
}
