// Package testnats gives tests a NATS JetStream to publish to: the shared
// server from internal/testenv, or an embedded nats-server of the test's own
// that can be stopped and restarted on the same port and store, plus streams
// with unique subjects and a reader of everything a stream holds.
package testnats

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox/internal/testenv"
)

// Server is an embedded nats-server with JetStream.
type Server struct {
	mu        sync.Mutex
	srv       *server.Server
	port      int
	storeDir  string
	jetStream bool
	log       *warnLog
}

// warnLog keeps the server's warnings and errors (NoLog hides them), so
// that a test that fails can say why the server refused a request: its
// API answers carry only a generic text, such as "error creating store
// for stream", and the cause goes to the log.
type warnLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *warnLog) add(level, format string, v []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) < 200 {
		l.lines = append(l.lines, level+" "+fmt.Sprintf(format, v...))
	}
}

func (l *warnLog) Noticef(string, ...any)         {}
func (l *warnLog) Debugf(string, ...any)          {}
func (l *warnLog) Tracef(string, ...any)          {}
func (l *warnLog) Warnf(format string, v ...any)  { l.add("[WRN]", format, v) }
func (l *warnLog) Errorf(format string, v ...any) { l.add("[ERR]", format, v) }
func (l *warnLog) Fatalf(format string, v ...any) { l.add("[FTL]", format, v) }

// Start runs an embedded server on a free loopback port with its store in
// t.TempDir(); it is shut down when t ends.
func Start(t testing.TB) *Server { t.Helper(); return start(t, true) }

// StartPlain is Start without JetStream: a core NATS server.
func StartPlain(t testing.TB) *Server { t.Helper(); return start(t, false) }

func start(t testing.TB, jetStream bool) *Server {
	t.Helper()
	s := &Server{port: server.RANDOM_PORT, storeDir: t.TempDir(), jetStream: jetStream, log: &warnLog{}}
	s.start(t)
	s.port = s.srv.Addr().(*net.TCPAddr).Port
	if jetStream {
		s.anchor(t)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			s.log.mu.Lock()
			defer s.log.mu.Unlock()
			for _, l := range s.log.lines {
				t.Logf("embedded nats-server: %s", l)
			}
		}
	})
	return s
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: s.port, JetStream: s.jetStream, StoreDir: s.storeDir, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatalf("embedded nats-server: %v", err)
	}
	srv.SetLogger(s.log, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded nats-server not ready within 10s")
	}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
}

// anchor creates a file stream that lives as long as the server (its
// store survives a Restart), so that the account's streams directory is
// never empty. When a stream is deleted, nats-server removes that
// directory and the account's in a goroutine if they are empty, and a
// file stream created meanwhile fails: "error creating store for stream",
// its log saying "could not create storage directory - mkdir
// …/jetstream/$G/streams: no such file or directory". Parallel tests that
// each delete their stream at the end met it whenever the last stream
// went just as another test created its own.
func (s *Server) anchor(t testing.TB) {
	t.Helper()
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatalf("embedded nats-server: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TESTNATS_ANCHOR", Subjects: []string{"_testnats.anchor"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("embedded nats-server: the anchor stream: %v", err)
	}
}

// Stop shuts the server down (a broker outage). Safe to call twice.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Restart starts the server again on the same port with the same store.
func (s *Server) Restart(t testing.TB) { s.Stop(); s.start(t) }

// URL is the server's nats:// URL.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// Shared returns the URL of the machine's NATS server (testenv.NATS).
func Shared(t testing.TB) string { return testenv.Require(t, testenv.NATS) }

// Stream is a stream capturing Subject+".>" on a server.
type Stream struct {
	Name, Subject string
	js            jetstream.JetStream
}

// NewStream creates a stream with a unique name and subject prefix on the
// server at url, deleted when t ends.
func NewStream(t testing.TB, url string) *Stream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		testenv.Unavailable(t, testenv.NATS, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	st := &Stream{Name: "T_" + strings.ToUpper(id), Subject: "t" + id, js: js}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for attempt := 1; ; attempt++ {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: st.Name, Subjects: []string{st.Subject + ".>"}, Storage: jetstream.FileStorage})
		if err == nil {
			break
		}
		// On a shared server, another process may delete the account's
		// last stream just now (see Server.anchor): nothing was created,
		// create it again.
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrStreamCreate && attempt < 3 {
			t.Logf("create stream %s, attempt %d: %v", st.Name, attempt, err)
			continue
		}
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, st.Name)
	})
	return st
}

// jsErrStreamCreate is JetStream's err_code of a stream creation that
// failed in the server (JSStreamCreateErrF), such as its store.
const jsErrStreamCreate jetstream.ErrorCode = 10049

// Topic returns a topic (subject) the stream captures.
func (s *Stream) Topic(name string) string { return s.Subject + "." + name }

// Count returns how many messages the stream holds.
func (s *Stream) Count(ctx context.Context) (uint64, error) {
	str, err := s.js.Stream(ctx, s.Name)
	if err != nil {
		return 0, err
	}
	info, err := str.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// Message is one stored message.
type Message struct {
	Seq     uint64
	Subject string
	Headers nats.Header
	Data    []byte
}

// All returns every message in the stream in sequence order.
func (s *Stream) All(ctx context.Context) ([]Message, error) {
	str, err := s.js.Stream(ctx, s.Name)
	if err != nil {
		return nil, err
	}
	info, err := str.Info(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Message, 0, info.State.Msgs)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := str.GetMsg(ctx, seq)
		if err != nil {
			return nil, fmt.Errorf("get message %d: %w", seq, err)
		}
		out = append(out, Message{Seq: m.Sequence, Subject: m.Subject, Headers: m.Header, Data: m.Data})
	}
	return out, nil
}
