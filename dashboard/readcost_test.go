package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox/dashboard"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// The dashboard reads what it shows: the list and the details of a DEAD
// event of 12 MiB (one too large for the broker, the kind the dashboard
// lists) each allocate far less than the payload, and give its size.
// Before the fix each request read the whole payload (issue 28: one GET
// of a 100 MB row took the relay from 274 to 582 MB). Not parallel: it
// measures the process's allocations.
func TestDeadReadsCostWhatTheyShow(t *testing.T) {
	for _, kind := range teststores.Kinds {
		t.Run(kind, func(t *testing.T) {
			o := teststores.Open(t, kind, store.Options{})
			const size = 12 << 20
			ph := "?"
			if kind == "postgres" {
				ph = "$1"
			}
			if _, err := o.DB.ExecContext(context.Background(), "INSERT INTO "+o.Store.(interface{ Table() string }).Table()+
				" (topic, event_key, event_type, payload, status, last_error) VALUES ('orders', 'big', 'TooLarge', "+ph+", 'DEAD', 'too large')",
				bytes.Repeat([]byte("x"), size)); err != nil {
				t.Fatal(err)
			}
			d, err := dashboard.New(dashboard.Config{Store: o.Store, SampleEvery: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(d)
			t.Cleanup(func() { srv.Close(); d.Close() })
			get := func(path string) (map[string]any, uint64) {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				resp, err := http.Get(srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				runtime.ReadMemStats(&after)
				if resp.StatusCode != 200 {
					t.Fatalf("GET %s = %d %s", path, resp.StatusCode, b)
				}
				var v map[string]any
				if err := json.Unmarshal(b, &v); err != nil {
					t.Fatal(err)
				}
				return v, after.TotalAlloc - before.TotalAlloc
			}
			list, n := get("/api/dead")
			if n > size/8 {
				t.Errorf("GET /api/dead with one DEAD event of %d bytes allocated %d bytes; want well below the payload", size, n)
			}
			ev := list["events"].([]any)[0].(map[string]any)
			id := int64(ev["id"].(float64))
			one, n := get("/api/dead/" + strconv.FormatInt(id, 10))
			if n > size/8 {
				t.Errorf("GET /api/dead/%d of %d bytes allocated %d bytes; want well below the payload", id, size, n)
			}
			for what, e := range map[string]map[string]any{"list": ev, "details": one} {
				p := e["payload"].(map[string]any)
				if p["size"] != float64(size) || p["truncated"] != true {
					t.Errorf("%s: payload %v; want size %d, truncated", what, p, size)
				}
			}
		})
	}
}

// At most MaxHeavyRequests API requests that read the database run at
// once: with the places taken, the next one waits (and is answered once
// one frees).
func TestHeavyRequestsAreBounded(t *testing.T) {
	o := teststores.Open(t, "sqlite", store.Options{})
	gate := &slowStore{Store: o.Store, release: make(chan struct{}), entered: make(chan struct{}, 100)}
	d, err := dashboard.New(dashboard.Config{Store: gate, SampleEvery: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(func() { srv.Close(); d.Close() })
	var wg sync.WaitGroup
	for range dashboard.MaxHeavyRequests + 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(srv.URL + "/api/dead")
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	for range dashboard.MaxHeavyRequests {
		<-gate.entered
	}
	select {
	case <-gate.entered:
		t.Errorf("more than %d requests read the store at once", dashboard.MaxHeavyRequests)
	case <-time.After(300 * time.Millisecond):
	}
	close(gate.release)
	wg.Wait()
}

// slowStore holds every ListDead of /api/dead (a page of 25; the
// sampler's reads pass) until release is closed.
type slowStore struct {
	store.Store
	release chan struct{}
	entered chan struct{}
}

func (s *slowStore) ListDead(ctx context.Context, q store.DeadQuery) ([]store.Record, error) {
	if q.Limit != 25 {
		return s.Store.ListDead(ctx, q)
	}
	s.entered <- struct{}{}
	<-s.release
	return s.Store.ListDead(ctx, q)
}
