package main_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// outbox demo --serve keeps the demo's relay and dashboard running until
// SIGINT: the dashboard shows the relay delivering the new orders, with
// actions enabled by OUTBOX_DASHBOARD_TOKEN, which is never printed.
func TestDemoServesDashboard(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const token = "demo-token-0123456789abcdef"
	cmd := exec.Command(binary, "demo", "--orders", "60", "--serve", addr)
	cmd.Env = append(os.Environ(), "OUTBOX_DB=", "OUTBOX_BROKER=", "OUTBOX_DASHBOARD_TOKEN="+token)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	overview := func() map[string]any {
		resp, err := http.Get("http://" + addr + "/api/overview")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var o map[string]any
		_ = json.Unmarshal(b, &o)
		return o
	}
	delivered := func(o map[string]any) float64 {
		rs, _ := o["relays"].([]any)
		if len(rs) != 1 {
			return -1
		}
		return rs[0].(map[string]any)["health"].(map[string]any)["delivered"].(float64)
	}
	deadline := time.Now().Add(90 * time.Second)
	var first float64 = -1
	for {
		if o := overview(); o != nil && o["actions"] == true {
			if d := delivered(o); first < 0 {
				first = d
			} else if d > first {
				break // the new orders are being delivered
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo's dashboard never showed its relay delivering; output:\n%s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	resp, err := http.Get("http://" + addr + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /: %v %v", resp, err)
	}
	resp.Body.Close()
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Errorf("demo --serve exited with %v after SIGINT:\n%s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("demo --serve did not stop within 20s of SIGINT")
	}
	if s := out.String(); !strings.Contains(s, "dashboard at http://"+addr+"/") || strings.Contains(s, token) {
		t.Errorf("the output does not give the dashboard's URL, or shows the token:\n%s", s)
	}
}

// syncBuffer is a bytes.Buffer written by a process and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
