package driver_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
)

func ev(id int64, key, typ string) outbox.Event {
	return outbox.Event{ID: id, Message: outbox.Message{Topic: "orders", Key: key, Type: typ}}
}

// Screen buries the bad rows of a claim, releases the later events of their
// keys when dead keys hold, and returns the rest in order; with nothing bad
// it changes nothing.
func TestScreen(t *testing.T) {
	ctx := context.Background()
	lease := driver.Lease{Owner: "relay", Epoch: 3}
	for _, hold := range []bool{true, false} {
		t.Run(fmt.Sprint("hold=", hold), func(t *testing.T) {
			events := []outbox.Event{ev(1, "a", "T"), ev(2, "b", "Bad\tType"), ev(3, "b", "T"), ev(4, "", "T"), ev(5, "c", "T"), ev(6, "c", "T"), ev(7, "", "T")}
			bad := map[int64]error{5: driver.BadRow("headers column is broken"), 7: driver.BadRow("headers column is broken")}
			var buried []driver.Burial
			var released []int64
			got, gotBuried, err := screen(ctx, lease, events, bad, hold,
				func(_ context.Context, p driver.BuryParams) error {
					l, b := p.Lease, p.Burials
					if l != lease {
						t.Errorf("Bury under lease %+v; want %+v", l, lease)
					}
					buried = append(buried, b...)
					return nil
				},
				func(_ context.Context, p driver.ReleaseParams) error {
					ids := p.IDs
					released = append(released, ids...)
					return nil
				})
			if err != nil {
				t.Fatal(err)
			}
			var gotIDs, buriedIDs []int64
			for _, e := range got {
				gotIDs = append(gotIDs, e.ID)
			}
			for _, b := range buried {
				buriedIDs = append(buriedIDs, b.ID)
				if !strings.HasPrefix(b.Error, driver.ErrBadRow.Error()) {
					t.Errorf("burial of %d: reason %q; want it to start with %q", b.ID, b.Error, driver.ErrBadRow)
				}
			}
			wantGot, wantReleased := []int64{1, 4}, []int64{3, 6}
			if !hold {
				wantGot, wantReleased = []int64{1, 3, 4, 6}, nil
			}
			if !slices.Equal(gotBuried, buried) {
				t.Errorf("Claim.Buried %v; want what was buried, %v", gotBuried, buried)
			}
			if !slices.Equal(gotIDs, wantGot) || !slices.Equal(buriedIDs, []int64{2, 5, 7}) || !slices.Equal(released, wantReleased) {
				t.Errorf("Screen: delivered %v, buried %v, released %v; want %v, [2 5 7], %v", gotIDs, buriedIDs, released, wantGot, wantReleased)
			}
		})
	}
	t.Run("nothing bad", func(t *testing.T) {
		events := []outbox.Event{ev(1, "a", "T"), ev(2, "b", "T")}
		fail := func(context.Context, driver.BuryParams) error { return errors.New("must not be called") }
		got, _, err := screen(ctx, lease, events, nil, true, fail, nil)
		if err != nil || len(got) != 2 || &got[0] != &events[0] {
			t.Errorf("Screen of good events: %v, %v; want them back untouched", got, err)
		}
		if n := testing.AllocsPerRun(100, func() { _, _, _ = screen(ctx, lease, events, nil, true, fail, nil) }); n != 0 {
			t.Errorf("Screen of good events allocates %v times; want 0", n)
		}
	})
	t.Run("bury fails", func(t *testing.T) {
		boom := errors.New("connection reset")
		_, _, err := screen(ctx, lease, []outbox.Event{ev(1, "", "Bad\nType")}, nil, true,
			func(context.Context, driver.BuryParams) error { return boom }, nil)
		if !errors.Is(err, boom) {
			t.Errorf("Screen when Bury fails: %v; want it to wrap the error", err)
		}
	})
}

// DecodeHeaders accepts a JSON object of strings and nothing else.
func TestDecodeHeaders(t *testing.T) {
	for _, c := range []struct {
		in, want string // want: the headers printed, or part of the error
	}{
		{``, "map[]"}, {`{}`, "map[]"}, {` { } `, "map[]"}, {`{"a":"1","b":""}`, "map[a:1 b:]"},
		{`[1,2]`, "an array ([1,2])"}, {`"x"`, `a string ("x")`}, {`null`, "it holds null"}, {`7`, "a number (7)"},
		{`{"a":1}`, `header "a" is a number (1)`}, {`{"a":null}`, `header "a" is null`}, {`{"a":{"b":"c"}}`, `header "a" is an object`},
		{`{"a":`, "text that is not JSON"}, {"\xff", "not valid UTF-8 (byte 0)"},
		{"{\"a\":\"\xff\"}", "not valid UTF-8 (byte 6)"}, {`{"a":"1","a":"2"}`, "map[a:2]"},
		{`{"a":"1","b":{"a":"x"}}`, `header "b" is an object`}, {`{"a":"1","b":"2","c":"3"}`, "map[a:1 b:2 c:3]"},
	} {
		h, err := driver.DecodeHeaders([]byte(c.in))
		switch {
		case err == nil && fmt.Sprint(h) != c.want:
			t.Errorf("DecodeHeaders(%q) = %v; want %s", c.in, h, c.want)
		case err != nil && (!errors.Is(err, driver.ErrBadRow) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("DecodeHeaders(%q): %v; want an ErrBadRow saying %q", c.in, err, c.want)
		}
	}
}

// CheckRow refuses what CloudEvents cannot carry and passes the rest.
func TestCheckRow(t *testing.T) {
	for _, c := range []struct {
		e    outbox.Event
		want string // "" = fine
	}{
		{ev(1, "order-42", "OrderPaid"), ""},
		{ev(1, "键🔑", "Заказ"), ""},
		{ev(1, "", "T"), ""},
		{ev(1, "k", "�"), ""}, // U+FFFD written as such is text
		{ev(1, "k", ""), "event_type is empty"},
		{ev(1, "k\x7f", "T"), "event_key has the control character U+007F"},
		{ev(1, "k", "T\u009f"), "event_type has the control character U+009F"},
		{ev(1, "k", "T\xc3"), "event_type is not valid UTF-8"},
		{ev(1, "k\ufdd0", "T"), "event_key has the Unicode noncharacter U+FDD0"},
		{outbox.Event{Message: outbox.Message{Topic: "", Type: "T"}}, "topic is empty"},
		{outbox.Event{Message: outbox.Message{Topic: "a\x00b", Type: "T"}}, "topic has the control character U+0000"},
		{outbox.Event{Message: outbox.Message{Topic: "t", Type: "T", SchemaVersion: -2}}, "schema_version is -2"},
	} {
		err := driver.CheckRow(&c.e)
		if (err == nil) != (c.want == "") || (err != nil && (!errors.Is(err, driver.ErrBadRow) || !strings.Contains(err.Error(), c.want))) {
			t.Errorf("CheckRow(%+v) = %v; want %q", c.e.Message, err, c.want)
		}
	}
}

func TestBalanceRequestCheck(t *testing.T) {
	for _, c := range []struct {
		req  driver.BalanceParams
		want string
	}{
		{driver.BalanceParams{Owner: "r"}, ""},
		{driver.BalanceParams{}, "owner is empty"},
		{driver.BalanceParams{Owner: strings.Repeat("r", 65)}, "longer than 64 bytes"},
		{driver.BalanceParams{Owner: "r", Release: []int{64}}, "shard 64 does not exist"},
		{driver.BalanceParams{Owner: "r", Release: []int{-1}}, "shard -1 does not exist"},
	} {
		err := c.req.Validate(64)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", c.req, err, c.want)
		}
	}
}

// screen runs ScreenClaim on a claim of events and returns what it kept
// and what it recorded as buried.
func screen(ctx context.Context, lease driver.Lease, events []outbox.Event, bad map[int64]error, hold bool,
	bury func(context.Context, driver.BuryParams) error, release func(context.Context, driver.ReleaseParams) error) ([]outbox.Event, []driver.Burial, error) {
	c := driver.Claim{Lease: lease, Events: events}
	err := driver.ScreenClaim(ctx, &c, bad, hold, bury, release)
	return c.Events, c.Buried, err
}
