package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/wire"
	"github.com/outbox-go/outbox/store"
)

const deadUsage = `dead list  [--topic T] [--key K] [--after ID] [--limit N] [--json]
       outbox dead show ID [--json]
       outbox dead retry ID... | --all | --topic T | --key K
       outbox dead purge --older-than DURATION [--topic T] (deletes dead events for good)`

func runDead(ctx context.Context, e env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(e.stdout, "Usage: outbox %s\n", deadUsage)
		if len(args) == 0 {
			return fmt.Errorf("%w: say list, show, retry or purge", wire.ErrUsage)
		}
		return nil
	}
	sub, args := args[0], args[1:]
	f := newFlags(e, "dead "+sub, deadUsage)
	topic := f.String("topic", "", "only events of this topic")
	key := f.String("key", "", "only events of this key")
	asJSON := f.Bool("json", false, "print JSON")
	after := f.Int64("after", 0, "list: ids after this one (paging)")
	limit := f.Int("limit", 50, "list: at most this many")
	all := f.Bool("all", false, "retry: every dead event")
	olderThan := f.Duration("older-than", -1, "purge: dead events created longer ago than this (e.g. 720h)")
	if err := f.parse(e, args); err != nil {
		return err
	}
	var ids []int64
	for _, a := range f.posArgs() {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("%w: %q is not an event id (a positive number from `outbox dead list`)", wire.ErrUsage, a)
		}
		ids = append(ids, id)
	}
	q := store.DeadQuery{IDs: ids, Topic: *topic, Key: *key, AfterID: *after, Limit: *limit}
	switch sub {
	case "list", "show", "retry", "purge":
	default:
		return fmt.Errorf("%w: unknown dead command %q: say list, show, retry or purge", wire.ErrUsage, sub)
	}
	if sub == "show" && len(ids) != 1 {
		return fmt.Errorf("%w: dead show takes one event id", wire.ErrUsage)
	}
	if sub == "retry" && len(ids) == 0 && !*all && *topic == "" && *key == "" {
		return fmt.Errorf("%w: dead retry needs event ids, --topic, --key or --all", wire.ErrUsage)
	}
	if sub == "purge" && *olderThan < 0 {
		return fmt.Errorf("%w: dead purge needs --older-than (0 purges every dead event)", wire.ErrUsage)
	}
	st, err := f.openStore(ctx, f.options())
	if err != nil {
		return err
	}
	defer st.Close()
	switch sub {
	case "list":
		recs, err := st.ListDead(ctx, q)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(e.stdout).Encode(toJSON(recs))
		}
		if len(recs) == 0 {
			fmt.Fprintln(e.stdout, "no dead events")
			return nil
		}
		fmt.Fprintf(e.stdout, "%-10s %-20s %-20s %-8s %s\n", "ID", "TOPIC", "KEY", "ATTEMPTS", "LAST ERROR")
		for _, r := range recs {
			fmt.Fprintf(e.stdout, "%-10d %-20s %-20s %-8d %s\n", r.ID, clip(r.Topic, 20), clip(r.Key, 20), r.Attempts, clip(r.LastError, 80))
		}
		if len(recs) == *limit {
			fmt.Fprintf(e.stdout, "more: outbox dead list --after %d\n", recs[len(recs)-1].ID)
		}
	case "show":
		r, err := st.Get(ctx, ids[0])
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(e.stdout).Encode(toJSON([]store.Record{r})[0])
		}
		printRecord(e, r)
	case "retry":
		n, err := st.RequeueDead(ctx, q)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "requeued %d dead event(s); a running relay delivers them next\n", n)
	case "purge":
		if len(ids) > 0 || *topic != "" || *key != "" {
			return fmt.Errorf("%w: dead purge selects by --older-than only", wire.ErrUsage)
		}
		n, err := st.Purge(ctx, store.PurgeRequest{Status: outbox.StatusDead, OlderThan: *olderThan})
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "purged %d dead event(s)\n", n)
	}
	return nil
}

type recordJSON struct {
	ID            int64             `json:"id"`
	EventID       string            `json:"event_id"`
	Topic         string            `json:"topic"`
	Key           string            `json:"event_key"`
	Type          string            `json:"event_type"`
	AggregateType string            `json:"aggregate_type,omitempty"`
	SchemaVersion int               `json:"schema_version"`
	ContentType   string            `json:"content_type"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       string            `json:"payload"`
	PayloadBase64 bool              `json:"payload_is_base64,omitempty"`
	Status        string            `json:"status"`
	Attempts      int               `json:"attempts"`
	LastError     string            `json:"last_error,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	NextAttemptAt time.Time         `json:"next_attempt_at"`
}

func toJSON(recs []store.Record) []recordJSON {
	out := make([]recordJSON, 0, len(recs))
	for _, r := range recs {
		j := recordJSON{ID: r.ID, EventID: r.EventID, Topic: r.Topic, Key: r.Key, Type: r.Type, AggregateType: r.AggregateType,
			SchemaVersion: r.SchemaVersion, ContentType: r.ContentType, Headers: r.Headers, Status: string(r.Status),
			Attempts: r.Attempts, LastError: r.LastError, CreatedAt: r.CreatedAt, NextAttemptAt: r.NextAttemptAt}
		if utf8.Valid(r.Payload) {
			j.Payload = string(r.Payload)
		} else {
			j.Payload, j.PayloadBase64 = base64.StdEncoding.EncodeToString(r.Payload), true
		}
		out = append(out, j)
	}
	return out
}

func printRecord(e env, r store.Record) {
	w := e.stdout
	fmt.Fprintf(w, "id              %d\nevent id        %s\nstatus          %s\ntopic           %s\nkey             %s\ntype            %s\n", r.ID, r.EventID, r.Status, r.Topic, r.Key, r.Type)
	fmt.Fprintf(w, "schema version  %d\ncontent type    %s\nattempts        %d\ncreated         %s\n", r.SchemaVersion, r.ContentType, r.Attempts, r.CreatedAt.Format(time.RFC3339))
	if r.LastError != "" {
		fmt.Fprintf(w, "last error      %s\n", r.LastError)
	}
	for k, v := range r.Headers {
		fmt.Fprintf(w, "header          %s: %s\n", k, v)
	}
	if utf8.Valid(r.Payload) {
		fmt.Fprintf(w, "payload         %s\n", clip(string(r.Payload), 2000))
	} else {
		fmt.Fprintf(w, "payload         (%d bytes, binary)\n", len(r.Payload))
	}
}

func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
