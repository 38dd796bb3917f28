package torture

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// relaySet runs the relay processes and restarts any that exits without
// being told to, as a process manager would.
type relaySet struct {
	prefix string                        // owner names are prefix-relay-<slot>-<generation>~<generation, 8 hex>
	cmd    func(owner string) *exec.Cmd  // builds one relay process
	logf   func(format string, a ...any) // progress

	mu      sync.Mutex
	procs   []*relayProc
	gen     int
	exits   int      // unexpected exits (restarted, as a process manager would)
	crashes []string // … of which panics, fatal errors or data races
	closing bool
	wg      sync.WaitGroup
}

type relayProc struct {
	slot    int
	owner   string
	cmd     *exec.Cmd
	done    chan struct{}
	stderr  *tail
	expect  bool // we killed or stopped it on purpose
	stopped bool // SIGSTOPped
}

func newRelaySet(prefix string, n int, cmd func(owner string) *exec.Cmd, logf func(string, ...any)) (*relaySet, error) {
	s := &relaySet{prefix: prefix, cmd: cmd, logf: logf, procs: make([]*relayProc, n)}
	for i := range n {
		if err := s.start(i); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// start runs a new process in slot i.
func (s *relaySet) start(i int) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	// Unique per process already: the relay keeps a name that ends in ~
	// and 8 hex digits, and the fencing probe matches it exactly.
	owner := fmt.Sprintf("%s-relay-%d-%d~%08x", s.prefix, i, s.gen, s.gen)
	s.gen++
	s.mu.Unlock()
	p := &relayProc{slot: i, owner: owner, done: make(chan struct{}), stderr: newTail(32 << 10)}
	p.cmd = s.cmd(owner)
	p.cmd.Stdout = p.stderr
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("torture: start relay: %w", err)
	}
	s.mu.Lock()
	if s.closing { // close began while this one started
		s.mu.Unlock()
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		return nil
	}
	s.procs[i] = p
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		err := p.cmd.Wait()
		close(p.done)
		s.mu.Lock()
		unexpected := !p.expect && !s.closing
		if unexpected {
			s.exits++
			// A relay that cannot reach the database at start-up exits
			// with its error (fail fast), which is no bug; a crash is.
			if out := p.stderr.String(); strings.Contains(out, "panic:") || strings.Contains(out, "fatal error:") || strings.Contains(out, "DATA RACE") {
				s.crashes = append(s.crashes, fmt.Sprintf("relay %s crashed (%v): %s", owner, err, lastLines(out, 20)))
			}
		}
		s.mu.Unlock()
		if unexpected {
			s.logf("relay %s exited by itself (%v); restarting it. Its last output:\n%s", owner, err, p.stderr.String())
			time.Sleep(500 * time.Millisecond)
			_ = s.start(i)
		}
	}()
	return nil
}

// owner names the process in slot i now.
func (s *relaySet) owner(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.procs[i]; p != nil {
		return p.owner
	}
	return ""
}

// kill SIGKILLs slot i, waits for it, and after down starts a new one.
func (s *relaySet) kill(i int, down time.Duration) string {
	s.mu.Lock()
	p := s.procs[i]
	p.expect = true
	s.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	time.Sleep(down)
	_ = s.start(i)
	return p.owner
}

// leave SIGTERMs slot i (a graceful stop), waits for it, and after down
// starts a new one. A relay that does not stop within 20 s is killed, and
// that is reported.
func (s *relaySet) leave(i int, down time.Duration) (string, error) {
	s.mu.Lock()
	p := s.procs[i]
	p.expect = true
	s.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case <-p.done:
		if !p.cmd.ProcessState.Success() {
			err = fmt.Errorf("relay %s did not stop cleanly on SIGTERM (%v): %s", p.owner, p.cmd.ProcessState, lastLines(p.stderr.String(), 10))
		}
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		err = fmt.Errorf("relay %s did not stop within 20 s of SIGTERM", p.owner)
	}
	if err != nil {
		s.mu.Lock()
		s.crashes = append(s.crashes, err.Error())
		s.mu.Unlock()
	}
	time.Sleep(down)
	_ = s.start(i)
	return p.owner, err
}

// pause SIGSTOPs slot i and returns the process's owner name.
func (s *relaySet) pause(i int) string {
	s.mu.Lock()
	p := s.procs[i]
	p.stopped = true
	s.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	return p.owner
}

// resume SIGCONTs whatever pause stopped in slot i.
func (s *relaySet) resume(i int) {
	s.mu.Lock()
	p := s.procs[i]
	p.stopped = false
	s.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
}

// unexpectedExits counts relays that exited without being told to, and
// describes the crashes among them.
func (s *relaySet) unexpectedExits() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exits, append([]string(nil), s.crashes...)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// logs returns each current process's last output.
func (s *relaySet) logs() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for _, p := range s.procs {
		if p != nil {
			out[p.owner] = p.stderr.String()
		}
	}
	return out
}

// close stops every process gracefully (SIGTERM; SIGKILL after 12 s) and
// reports the ones that did not exit cleanly.
func (s *relaySet) close() []string {
	s.mu.Lock()
	s.closing = true
	procs := append([]*relayProc(nil), s.procs...)
	s.mu.Unlock()
	var bad []string
	for _, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
			continue
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			if !p.cmd.ProcessState.Success() {
				bad = append(bad, fmt.Sprintf("relay %s exited with %v after SIGTERM", p.owner, p.cmd.ProcessState))
			}
		case <-time.After(12 * time.Second):
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			bad = append(bad, fmt.Sprintf("relay %s did not stop within 12s of SIGTERM", p.owner))
		}
	}
	s.wg.Wait()
	return bad
}

// tail keeps the last n bytes written to it.
type tail struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func newTail(n int) *tail { return &tail{n: n} }

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > t.n {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.n:]...)
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
