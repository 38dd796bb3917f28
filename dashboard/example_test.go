package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/dashboard"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

// A dashboard for a relay: mount it on a loopback address, with a token to
// enable retry, skip and purge.
func ExampleNew() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	st, _ := sqlitestore.Open(ctx, "sqlite:"+filepath.Join(dir, "app.db"), sqlitestore.Config{})
	defer st.Close()
	_ = st.Migrate(ctx)
	br, _ := membroker.New(membroker.Config{}) // natsbroker.Dial(…) in production
	r, _ := relay.New(st, br, relay.Config{})

	d, err := dashboard.New(dashboard.Config{Store: st, Relay: r, Token: os.Getenv("OUTBOX_DASHBOARD_TOKEN")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	srv := httptest.NewServer(d) // http.ListenAndServe("127.0.0.1:8080", d) in production
	defer srv.Close()

	resp, _ := srv.Client().Get(srv.URL + "/")
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, strings.Contains(string(page), "dead letters"))
	// Output: 200 true
}
