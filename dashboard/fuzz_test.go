package dashboard_test

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outbox-go/outbox/dashboard"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// No request, however odd, gets a 500 or panics the handler.
func FuzzAPI(f *testing.F) {
	st := teststores.Open(f, "sqlite", store.Options{}).Store
	d, err := dashboard.New(dashboard.Config{Store: st, Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { d.Close() })
	for _, s := range []struct{ method, path, auth, body string }{
		{"GET", "/api/overview", "", ""},
		{"GET", "/api/dead?limit=5&after=3&topic=t", "", ""},
		{"GET", "/api/dead/12", "", ""},
		{"POST", "/api/dead/1/retry", "Bearer " + testToken, ""},
		{"POST", "/api/dead/1/skip", "bearer " + testToken, ""},
		{"POST", "/api/purge", "Bearer " + testToken, `{"older_than":"1h","topic":"x"}`},
		{"POST", "/api/purge", "Bearer", `{`},
		{"GET", "/api//dead//", "", ""},
		{"OPTIONS", "/", "", ""},
	} {
		f.Add(s.method, s.path, s.auth, s.body)
	}
	f.Fuzz(func(t *testing.T, method, path, auth, body string) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req := httptest.NewRequest("GET", "/", strings.NewReader(body))
		req.Method = method
		req.URL.Path = path
		if q := strings.IndexByte(path, '?'); q >= 0 {
			req.URL.Path, req.URL.RawQuery = path[:q], path[q+1:]
		}
		req.Header.Set("Authorization", auth)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Errorf("%s %q: %d %s", method, path, rec.Code, rec.Body.String())
		}
	})
}
