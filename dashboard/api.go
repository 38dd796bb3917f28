package dashboard

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/store"
)

// apiError is a 4xx or 503 with a message.
type apiError struct {
	code int
	msg  string
}

func (d *Dashboard) serveAPI(w http.ResponseWriter, r *http.Request, path string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var (
		method string
		fn     func(*http.Request, []string) (any, *apiError)
		action bool
	)
	switch {
	case len(parts) == 1 && parts[0] == "overview":
		method, fn = http.MethodGet, d.overview
	case len(parts) == 1 && parts[0] == "dead":
		method, fn = http.MethodGet, d.deadList
	case len(parts) == 2 && parts[0] == "dead":
		method, fn = http.MethodGet, d.deadOne
	case len(parts) == 3 && parts[0] == "dead" && parts[2] == "retry":
		method, fn, action = http.MethodPost, d.retry, true
	case len(parts) == 3 && parts[0] == "dead" && parts[2] == "skip":
		method, fn, action = http.MethodPost, d.skip, true
	case len(parts) == 1 && parts[0] == "purge":
		method, fn, action = http.MethodPost, d.purge, true
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such API endpoint: /api/" + path})
		return
	}
	if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
		w.Header().Set("Allow", method)
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": fmt.Sprintf("%s is not allowed on /api/%s; use %s", r.Method, path, method)})
		return
	}
	if action {
		switch {
		case !d.actionsEnabled():
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "actions are off: " + d.cfg.ReadOnlyHint})
			return
		case !d.authorized(r):
			w.Header().Set("WWW-Authenticate", `Bearer realm="outbox dashboard"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong token: send it as the header Authorization: Bearer <token>"})
			return
		}
	}
	if parts[0] != "overview" { // the overview reads the sampler's memory
		t := time.NewTimer(heavyWait)
		select {
		case d.heavy <- struct{}{}:
			t.Stop()
			defer func() { <-d.heavy }()
		case <-t.C:
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": fmt.Sprintf("busy: %d requests that read the database are running; try again", MaxHeavyRequests)})
			return
		case <-r.Context().Done():
			return
		}
	}
	v, aerr := fn(r, parts)
	if aerr != nil {
		writeJSON(w, aerr.code, map[string]string{"error": aerr.msg})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // escapes <, > and & as well
}

// storeErr turns a store error into an API error; secrets are masked.
func storeErr(op string, err error) *apiError {
	if errors.Is(err, store.ErrNotFound) {
		return &apiError{http.StatusNotFound, op + ": no such event"}
	}
	return &apiError{http.StatusServiceUnavailable, op + ": the store failed: " + redact.Text(err.Error())}
}

type overviewJSON struct {
	Now            time.Time  `json:"now"`
	Actions        bool       `json:"actions"`
	ReadOnlyHint   string     `json:"read_only_hint,omitempty"`
	SampleEvery    float64    `json:"sample_every_seconds"`
	Backlog        *backlogJ  `json:"backlog"` // null before the first sample
	BacklogError   string     `json:"backlog_error,omitempty"`
	ETASeconds     *float64   `json:"eta_seconds"`
	DrainPerS      *float64   `json:"net_drain_per_second"`
	HeldKeys       []heldKey  `json:"held_keys"`
	HeldKeysAll    bool       `json:"held_keys_complete"`
	HeldKeysError  string     `json:"held_keys_error,omitempty"`
	HeldKeysOf     int        `json:"held_keys_scanned"`
	Relays         []relayJ   `json:"relays"`
	Series         []point    `json:"series"`
	SeriesHasRates bool       `json:"series_has_rates"`
	LastSample     *time.Time `json:"last_sample"`
}

type backlogJ struct {
	Pending       int64   `json:"pending"`
	OldestSeconds float64 `json:"oldest_pending_seconds"`
	Dead          int64   `json:"dead"`
	// DeadAtLeast: Dead is store.DeadCap, the most the backlog query
	// counts; there may be more (outbox status counts them all).
	DeadAtLeast bool `json:"dead_at_least"`
}

type relayJ struct {
	Owner  string         `json:"owner"`
	Health map[string]any `json:"health"`
}

func (d *Dashboard) overview(*http.Request, []string) (any, *apiError) {
	snap := d.samples.snapshot(d.cfg.Relay != nil)
	o := overviewJSON{
		Now: time.Now().UTC(), Actions: d.actionsEnabled(), SampleEvery: d.cfg.SampleEvery.Seconds(),
		BacklogError: snap.lastErr, ETASeconds: snap.etaSeconds, DrainPerS: snap.drainPerS,
		HeldKeys: snap.held, HeldKeysAll: snap.heldFull, HeldKeysError: snap.heldErr, HeldKeysOf: heldScan,
		Relays: []relayJ{}, Series: snap.series, SeriesHasRates: d.cfg.Relay != nil,
	}
	if o.HeldKeys == nil {
		o.HeldKeys = []heldKey{}
	}
	if !o.Actions {
		o.ReadOnlyHint = d.cfg.ReadOnlyHint
	}
	if snap.last != nil {
		at := snap.last.at.UTC()
		o.LastSample = &at
		if snap.last.ok {
			b := snap.last.backlog
			o.Backlog = &backlogJ{Pending: b.Pending, OldestSeconds: b.OldestPendingAge.Seconds(), Dead: b.Dead, DeadAtLeast: snap.last.deadCapped}
		}
	}
	if d.cfg.Relay != nil {
		o.Relays = append(o.Relays, relayJ{Owner: d.cfg.Relay.Owner(), Health: fields(d.cfg.Relay.Health())})
	}
	return o, nil
}

// fields turns a struct (relay.Health) into snake_case JSON fields, zero
// times as null, so that fields the relay adds later (shards held) show
// up without a change here; the page lists the ones it does not know.
func fields(v any) map[string]any {
	out := map[string]any{}
	rv := reflect.ValueOf(v)
	rt := rv.Type()
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		if !f.IsExported() {
			continue
		}
		val := rv.Field(i).Interface()
		if t, ok := val.(time.Time); ok {
			if t.IsZero() {
				val = nil
			} else {
				val = t.UTC()
			}
		}
		if s, ok := val.(string); ok {
			val = redact.Text(s)
		}
		out[snake(f.Name)] = val
	}
	return out
}

func snake(name string) string {
	var b strings.Builder
	rs := []rune(name)
	for i, r := range rs {
		if unicode.IsUpper(r) {
			if i > 0 && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// eventJSON is a dead event as the page shows it: user data capped.
type eventJSON struct {
	ID            int64             `json:"id"`
	EventID       string            `json:"event_id"`
	Status        string            `json:"status"`
	Topic         string            `json:"topic"`
	Key           string            `json:"key"`
	Type          string            `json:"type"`
	ContentType   string            `json:"content_type"`
	Attempts      int               `json:"attempts"`
	CreatedAt     time.Time         `json:"created_at"`
	LastError     string            `json:"last_error"`
	LastErrorCut  bool              `json:"last_error_truncated"`
	Payload       payloadJSON       `json:"payload"`
	Headers       map[string]string `json:"headers,omitempty"`
	PayloadBase64 string            `json:"payload_base64,omitempty"` // the whole payload, in skip's answer only
}

type payloadJSON struct {
	Preview   string `json:"preview"`
	Encoding  string `json:"encoding"` // "text" or "hex"
	Size      int    `json:"size"`
	Truncated bool   `json:"truncated"`
}

func (d *Dashboard) event(r store.Record, withHeaders bool) eventJSON {
	n := d.cfg.PreviewBytes
	e := eventJSON{ID: r.ID, EventID: r.EventID, Status: string(r.Status), Topic: clipText(r.Topic, 200), Key: clipText(r.Key, 200),
		Type: clipText(r.Type, 200), ContentType: clipText(r.ContentType, 200), Attempts: r.Attempts, CreatedAt: r.CreatedAt.UTC()}
	e.LastError = clipText(r.LastError, n)
	e.LastErrorCut = len(e.LastError) < len(r.LastError)
	e.Payload = preview(r.Payload, r.PayloadSize, n)
	if withHeaders && len(r.Headers) > 0 {
		e.Headers = make(map[string]string, len(r.Headers))
		for k, v := range r.Headers {
			e.Headers[clipText(k, 200)] = clipText(v, n)
		}
	}
	return e
}

// preview shows at most n bytes of a payload: as text when it is UTF-8
// (cut at a rune boundary), else as hex of its first n/2 bytes.
func preview(p []byte, size, n int) payloadJSON {
	size = max(size, len(p))
	if size > len(p) {
		// a prefix (store.ListDead): it may end inside a character
		for cut := len(p) - 1; cut >= 0 && cut >= len(p)-utf8.UTFMax; cut-- {
			if utf8.RuneStart(p[cut]) {
				if !utf8.FullRune(p[cut:]) {
					p = p[:cut]
				}
				break
			}
		}
	}
	out := payloadJSON{Size: size, Encoding: "text"}
	if utf8.Valid(p) {
		out.Preview = clipText(string(p), n)
		out.Truncated = len(out.Preview) < size
		return out
	}
	out.Encoding = "hex"
	m := min(len(p), max(n/2, 1))
	out.Preview = hex.EncodeToString(p[:m])
	out.Truncated = m < size
	return out
}

// clipText cuts s to at most n bytes at a rune boundary; invalid UTF-8 is
// replaced, so the JSON is always valid text.
func clipText(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

type deadListJSON struct {
	Events []eventJSON `json:"events"`
	// NextAfter is the after= of the next page; 0 when this is the last.
	NextAfter int64 `json:"next_after"`
}

func (d *Dashboard) deadList(r *http.Request, _ []string) (any, *apiError) {
	q := r.URL.Query()
	dq := store.DeadQuery{Topic: q.Get("topic"), Key: q.Get("key"), Limit: 25}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageSize {
			return nil, &apiError{http.StatusBadRequest, fmt.Sprintf("limit %q: give a number from 1 to %d", v, MaxPageSize)}
		}
		dq.Limit = n
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, &apiError{http.StatusBadRequest, fmt.Sprintf("after %q: give an event id (a number, 0 for the first page)", v)}
		}
		dq.AfterID = n
	}
	for name, v := range map[string]string{"topic": dq.Topic, "key": dq.Key} {
		if len(v) > 1024 {
			return nil, &apiError{http.StatusBadRequest, name + " is longer than 1024 bytes"}
		}
	}
	recs, err := d.cfg.Store.ListDead(r.Context(), dq)
	if err != nil {
		return nil, storeErr("listing dead events", err)
	}
	out := deadListJSON{Events: make([]eventJSON, 0, len(recs))}
	for _, rec := range recs {
		out.Events = append(out.Events, d.event(rec, false))
	}
	if len(recs) == dq.Limit {
		out.NextAfter = recs[len(recs)-1].ID
	}
	return out, nil
}

func parseID(s string) (int64, *apiError) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, &apiError{http.StatusBadRequest, fmt.Sprintf("%q is not an event id (a positive number)", clipText(s, 40))}
	}
	return id, nil
}

func (d *Dashboard) deadOne(r *http.Request, parts []string) (any, *apiError) {
	id, aerr := parseID(parts[1])
	if aerr != nil {
		return nil, aerr
	}
	rec, aerr := d.mustBeDead(r, id)
	if aerr != nil {
		return nil, aerr
	}
	return d.event(rec, true), nil
}

// mustBeDead returns the DEAD event id with the first store.PreviewBytes
// of its payload (a DEAD event is often one too large for the broker: a
// request reads a preview, never the whole), or why it cannot.
func (d *Dashboard) mustBeDead(r *http.Request, id int64) (store.Record, *apiError) {
	recs, err := d.cfg.Store.ListDead(r.Context(), store.DeadQuery{IDs: []int64{id}, Limit: 1})
	if err != nil {
		return store.Record{}, storeErr(fmt.Sprintf("event %d", id), err)
	}
	if len(recs) == 0 {
		return store.Record{}, &apiError{http.StatusNotFound, fmt.Sprintf("no such event among the DEAD ones: event %d was retried, skipped or delivered, or never existed", id)}
	}
	return recs[0], nil
}

func (d *Dashboard) retry(r *http.Request, parts []string) (any, *apiError) {
	id, aerr := parseID(parts[1])
	if aerr != nil {
		return nil, aerr
	}
	rec, aerr := d.mustBeDead(r, id)
	if aerr != nil {
		return nil, aerr
	}
	n, err := d.cfg.Store.RequeueDead(r.Context(), store.DeadQuery{IDs: []int64{id}})
	if err != nil {
		return nil, storeErr(fmt.Sprintf("retrying event %d", id), err)
	}
	if n == 0 {
		return nil, &apiError{http.StatusConflict, fmt.Sprintf("event %d is no longer DEAD (retried or purged meanwhile?)", id)}
	}
	if d.cfg.Relay != nil {
		d.cfg.Relay.Wake()
	}
	d.cfg.Logger.Info("dashboard: dead event requeued", "id", id, "event_id", rec.EventID, "topic", redact.Text(rec.Topic))
	return map[string]int64{"requeued": n}, nil
}

func (d *Dashboard) skip(r *http.Request, parts []string) (any, *apiError) {
	id, aerr := parseID(parts[1])
	if aerr != nil {
		return nil, aerr
	}
	rec, aerr := d.mustBeDead(r, id)
	if aerr != nil {
		return nil, aerr
	}
	// The answer carries the payload whole, the operator's copy of what
	// is deleted: read it, within bounds.
	if rec.PayloadSize > MaxSkipPayload {
		return nil, &apiError{http.StatusConflict, fmt.Sprintf("event %d's payload is %d bytes, more than skip returns (%d): save it first (outbox dead show %d --raw > payload.bin), then purge it (outbox dead purge --older-than 0s --key KEY, or --topic)", id, rec.PayloadSize, MaxSkipPayload, id)}
	}
	if rec.PayloadSize > len(rec.Payload) {
		whole, err := d.cfg.Store.Get(r.Context(), id)
		if err != nil {
			return nil, storeErr(fmt.Sprintf("event %d", id), err)
		}
		rec.Payload = whole.Payload
	}
	n, err := d.cfg.Store.Purge(r.Context(), store.PurgeRequest{Status: outbox.StatusDead, IDs: []int64{id}})
	if err != nil {
		return nil, storeErr(fmt.Sprintf("skipping event %d", id), err)
	}
	if n == 0 {
		return nil, &apiError{http.StatusConflict, fmt.Sprintf("event %d is no longer DEAD (retried or purged meanwhile?)", id)}
	}
	if d.cfg.Relay != nil {
		d.cfg.Relay.Wake() // its key's later events may go now
	}
	d.cfg.Logger.Warn("dashboard: dead event skipped (deleted, not delivered)", "id", id, "event_id", rec.EventID,
		"topic", redact.Text(rec.Topic), "key", redact.Text(rec.Key), "type", redact.Text(rec.Type))
	e := d.event(rec, true)
	e.PayloadBase64 = base64.StdEncoding.EncodeToString(rec.Payload)
	return map[string]any{"skipped": n, "event": e}, nil
}

type purgeJSON struct {
	OlderThan *string `json:"older_than"`
	Topic     string  `json:"topic"`
	Key       string  `json:"key"`
}

func (d *Dashboard) purge(r *http.Request, _ []string) (any, *apiError) {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return nil, &apiError{http.StatusUnsupportedMediaType, `send a JSON body with Content-Type: application/json, e.g. {"older_than":"720h"}`}
	}
	var req purgeJSON
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, &apiError{http.StatusBadRequest, `the body is not {"older_than":"720h","topic":"…","key":"…"} (at most 4 KiB): ` + clipText(err.Error(), 200)}
	}
	if req.OlderThan == nil {
		return nil, &apiError{http.StatusBadRequest, `older_than is required ("0s" purges every dead event)`}
	}
	age, err := time.ParseDuration(*req.OlderThan)
	if err != nil || age < 0 {
		return nil, &apiError{http.StatusBadRequest, fmt.Sprintf("older_than %q is not a duration like 720h or 0s", clipText(*req.OlderThan, 40))}
	}
	n, err := d.cfg.Store.Purge(r.Context(), store.PurgeRequest{Status: outbox.StatusDead, OlderThan: age, Topic: req.Topic, Key: req.Key})
	if err != nil {
		return nil, storeErr("purging dead events", err)
	}
	if n > 0 && d.cfg.Relay != nil {
		d.cfg.Relay.Wake()
	}
	d.cfg.Logger.Warn("dashboard: dead events purged", "count", n, "older_than", age, "topic", redact.Text(req.Topic), "key", redact.Text(req.Key))
	return map[string]int64{"purged": n}, nil
}
