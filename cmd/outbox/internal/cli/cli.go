// Package cli implements the outbox command: migrate, relay, status, dead,
// broker, version, demo, bench and torture. cmd/outbox/main.go only calls
// Main.
package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/outbox-go/outbox/broker/redisbroker"
	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the command could not do its job (database down, table missing, …)
	exitUsage = 2 // what was typed is wrong: a flag, a value, a URL
	exitCheck = 3 // status --check ran and found a problem
)

type env struct {
	stdout, stderr io.Writer
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e env, args []string) error
}

func commands() []command {
	return []command{
		{"migrate", "create the outbox schema (idempotent)", runMigrate},
		{"relay", "deliver events to a broker until SIGINT/SIGTERM", runRelay},
		{"status", "counts by status, oldest pending age, blocked keys", runStatus},
		{"dead", "dead letters: list, show, retry, purge", runDead},
		{"broker", "set the broker up for the relay (a JetStream stream capturing the topics)", runBroker},
		{"version", "the module version and VCS revision of this build", runVersion},
		{"demo", "the embedded end-to-end story (SQLite + embedded NATS)", runDemo},
		{"bench", "measure delivery against the raw SQL limit, in one run", runBench},
		{"cdc", "the pgcdc source's replication slot: drop-slot, lag", runCDC},
		{"torture", "soak: relays under a seeded fault schedule, checked for loss, phantoms, order", runTorture},
	}
}

const topUsage = `outbox — the transactional outbox: events written in your transaction, delivered at least once, in order per key.

Usage: outbox <command> [flags]

Commands:
%s
Every command takes --help. --db (or OUTBOX_DB) is one of:
  ` + wire.DBSchemes + `
--broker (or OUTBOX_BROKER): ` + wire.BrokerSchemes + `
outbox --version prints the build's version.
Exit codes: 0 done; 1 failed (see the message); 2 bad flags, values or URLs;
3 status --check found a problem.
`

// Main runs the command line args (without the program name) and returns
// the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := env{stdout: stdout, stderr: stderr}
	// go-redis prints its pool's dial failures to stderr on its own, before
	// and besides the error the command reports; the relay routes them to
	// its log at debug level (newLogger), every other command drops them.
	redisbroker.LogTo(slog.New(slog.DiscardHandler))
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = append([]string{"version"}, args[1:]...)
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		var b strings.Builder
		for _, c := range commands() {
			fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
		}
		fmt.Fprintf(stdout, topUsage, b.String())
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(ctx, e, args[1:])
			if err != nil {
				// A last net under every message: whatever a command
				// forgot to scrub, no URL the user gave is printed with
				// its secret.
				err = wire.ScrubError(err, connectionArgs(args[1:])...)
			}
			return report(e, c.name, err)
		}
	}
	fmt.Fprintf(stderr, "outbox: unknown command %q; run `outbox --help` for the list\n", args[0])
	return exitUsage
}

func report(e env, name string, err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errCheckFailed):
		return exitCheck
	case errors.Is(err, wire.ErrUsage):
		fmt.Fprintf(e.stderr, "outbox %s: %s\n", name, oneLine(strings.TrimPrefix(err.Error(), "usage: ")))
		return exitUsage
	default:
		fmt.Fprintf(e.stderr, "outbox %s: %s\n", name, oneLine(err.Error()))
		return exitFail
	}
}

// connectionArgs returns the values given to --db and --broker (either
// spelling, = or a separate argument, or a db/broker line of the --config
// file) and OUTBOX_DB and OUTBOX_BROKER.
func connectionArgs(args []string) []string {
	out := []string{os.Getenv("OUTBOX_DB"), os.Getenv("OUTBOX_BROKER")}
	for i, a := range args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "db" && name != "broker" && name != "config") {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				continue
			}
			value = args[i+1]
		}
		if name == "config" {
			out = append(out, configConnections(value)...)
			continue
		}
		out = append(out, value)
	}
	return out
}

// configConnections returns the db and broker values of a --config file,
// read as applyConfig reads it; nothing when it cannot be read.
func configConnections(path string) []string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		name, value, ok := strings.Cut(strings.TrimSpace(line), "=")
		name = strings.TrimPrefix(strings.TrimSpace(name), "--")
		if ok && (name == "db" || name == "broker") {
			out = append(out, strings.Trim(strings.TrimSpace(value), `"`))
		}
	}
	return out
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r", " ")
	return strings.ReplaceAll(s, "\n", " ")
}

// flags is a FlagSet with the common --db/--table/--schema/--config flags.
type flags struct {
	*flag.FlagSet
	db, table, schema, config string
	usage                     string
	positional                []string
	onCommandLine             map[string]bool // flags given on the command line (not by --config, not defaults)
	noStore                   bool            // the command opens no database: no --db, --table, --schema
}

// posArgs returns the positional arguments, wherever they stood.
func (f *flags) posArgs() []string { return f.positional }

func newFlags(e env, name, usage string) *flags {
	f := newBareFlags(e, name, usage)
	f.noStore = false
	f.StringVar(&f.db, "db", os.Getenv("OUTBOX_DB"), "database URL (or OUTBOX_DB): "+wire.DBSchemes+"; "+secretsHint("OUTBOX_DB"))
	f.StringVar(&f.table, "table", store.DefaultTable, "outbox table name")
	f.StringVar(&f.schema, "schema", "", "PostgreSQL schema / MySQL database of the table (default: the connection's)")
	return f
}

// secretsHint is the --db and --broker help's word on passwords.
func secretsHint(env string) string {
	return "a password on the command line is visible to every user of the machine (ps, /proc/PID/cmdline): pass it in " + env + " or a --config file"
}

// commandLineSecrets returns a warning for each of the flags names given
// on the command line with a URL that holds a password or another secret
// (a long-running process shows its arguments to every local user for as
// long as it runs); none for values from the environment or --config.
func (f *flags) commandLineSecrets(values map[string]string) []string {
	var out []string
	for _, name := range []string{"db", "broker"} {
		v, ok := values[name]
		if !ok || !f.onCommandLine[name] || v == "" || wire.Mask(v) == v {
			continue
		}
		env := "OUTBOX_" + strings.ToUpper(name)
		out = append(out, fmt.Sprintf("--%s holds a password or secret, which every user of this machine can read for as long as the relay runs (ps, /proc/PID/cmdline): pass it in %s or a --config file instead", name, env))
	}
	return out
}

// newBareFlags is newFlags for a command that opens no database: only
// --config and the command's own flags.
func newBareFlags(_ env, name, usage string) *flags {
	f := &flags{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), usage: usage, noStore: true}
	f.SetOutput(io.Discard)
	f.Usage = func() {}
	f.StringVar(&f.config, "config", "", "file of `name = value` lines setting any of these flags (command-line flags win)")
	return f
}

// parse parses args, applies --config and prints help on --help.
func (f *flags) parse(e env, args []string) error {
	// Flags may come after positional arguments (`dead show 42 --json`):
	// parse, take one positional, parse the rest, and so on.
	var positional []string
	for {
		if err := f.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.printHelp(e.stdout)
				return flag.ErrHelp
			}
			return fmt.Errorf("%w: %s (see `outbox %s --help`)", wire.ErrUsage, dashDash(err.Error()), f.Name())
		}
		if f.NArg() == 0 {
			break
		}
		positional = append(positional, f.Arg(0))
		args = f.Args()[1:]
	}
	f.positional = positional
	f.onCommandLine = map[string]bool{}
	f.Visit(func(fl *flag.Flag) { f.onCommandLine[fl.Name] = true })
	if f.config != "" {
		secret, err := f.applyConfig(f.config)
		if err != nil {
			return err
		}
		if w := exposed(f.config, "--config", secret); w != "" {
			fmt.Fprintf(e.stderr, "outbox %s: warning: %s\n", f.Name(), w)
		}
	}
	if f.noStore {
		return nil
	}
	return f.checkNames()
}

// dashDash writes the flag package's "-name" as "--name", the form the
// help and the README use.
func dashDash(msg string) string {
	for _, p := range []string{"for flag -", "not defined: -", "needs an argument: -", `" for -`} {
		msg = strings.Replace(msg, p, p+"-", 1)
	}
	return msg
}

// checkNames refuses a bad --table or --schema before anything is opened:
// it is a typing error (exit 2), and an empty --table would otherwise fall
// back to the default table while every message named "".
func (f *flags) checkNames() error {
	if err := store.ValidateName("table", f.table); err != nil {
		return fmt.Errorf("%w: --table %q: use lower-case letters, digits and _, at most %d, not starting with a digit (default %s)", wire.ErrUsage, f.table, store.MaxTableName, store.DefaultTable)
	}
	if len(f.table) > store.MaxTableName {
		return fmt.Errorf("%w: --table %q is longer than %d characters: the derived names (%s_archive, %s_migrations) must fit in 63", wire.ErrUsage, f.table, store.MaxTableName, f.table, f.table)
	}
	if f.schema != "" {
		if err := store.ValidateName("schema", f.schema); err != nil {
			return fmt.Errorf("%w: --schema %q: use lower-case letters, digits and _, at most 63, not starting with a digit", wire.ErrUsage, f.schema)
		}
	}
	return nil
}

func (f *flags) printHelp(w io.Writer) {
	fmt.Fprintf(w, "Usage: outbox %s\n\nFlags:\n", f.usage)
	var b strings.Builder
	f.SetOutput(&b)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
	// The flag package lists "-name"; the messages and the README say "--name".
	io.WriteString(w, strings.ReplaceAll("\n"+b.String(), "\n  -", "\n  --")[1:])
}

// applyConfig sets flags not given on the command line from a file of
// `name = value` lines (# comments, blank lines ignored). secret says the
// file holds a password or another secret (in a URL, or a token).
func (f *flags) applyConfig(path string) (secret bool, err error) {
	file, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("%w: --config: %v", wire.ErrUsage, err)
	}
	defer file.Close()
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	sc := bufio.NewScanner(file)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return secret, fmt.Errorf("%w: %s:%d: expected `name = value`", wire.ErrUsage, path, n)
		}
		name = strings.TrimPrefix(strings.TrimSpace(name), "--")
		value = strings.Trim(strings.TrimSpace(value), `"`)
		if f.Lookup(name) == nil {
			return secret, fmt.Errorf("%w: %s:%d: unknown setting %q for outbox %s", wire.ErrUsage, path, n, name, f.Name())
		}
		secret = secret || wire.Mask(value) != value
		if set[name] {
			continue
		}
		if err := f.Set(name, value); err != nil {
			return secret, fmt.Errorf("%w: %s:%d: %s: %v", wire.ErrUsage, path, n, name, err)
		}
	}
	return secret, sc.Err()
}

// exposed is a warning when the file at path, which holds a secret, can
// be read by its group or by others (what flag names it); "" otherwise.
func exposed(path, flag string, secret bool) string {
	st, err := os.Stat(path)
	if err != nil || !secret || st.Mode().Perm()&0o077 == 0 {
		return ""
	}
	return fmt.Sprintf("%s %s holds a password or token and is readable by its group or others (mode %#o): chmod 600 %s", flag, path, st.Mode().Perm(), path)
}

func (f *flags) options() store.Options {
	return store.Options{Table: f.table, Schema: f.schema}
}

func (f *flags) openStore(ctx context.Context, opts store.Options) (driver.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return wire.OpenStore(ctx, f.db, opts)
}

// openExisting is openStore for the commands that only read or repair a
// table (status, dead, relay): a SQLite file that does not exist is
// reported, not created empty by opening it.
func (f *flags) openExisting(ctx context.Context, opts store.Options) (driver.Store, error) {
	if path, ok := sqlitePath(f.db); ok && path != ":memory:" {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("SQLite database file %s does not exist: check --db, or create it with `outbox migrate --db %s`", path, wire.Mask(f.db))
		}
	}
	return f.openStore(ctx, opts)
}

// sqlitePath returns the file a sqlite: URL names, as sqlitestore reads it.
func sqlitePath(raw string) (string, bool) {
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok || (!strings.EqualFold(scheme, "sqlite") && !strings.EqualFold(scheme, "sqlite3")) {
		return "", false
	}
	path, _, _ := strings.Cut(strings.TrimPrefix(rest, "//"), "?")
	return path, path != ""
}

// storeErr names the table and database of a missing-table error, which
// the stores report without them.
func (f *flags) storeErr(err error) error {
	if errors.Is(err, store.ErrNotMigrated) {
		return notMigrated{err: err, msg: fmt.Sprintf("the outbox table %s does not exist in %s: create it with `outbox migrate --db URL%s` (or check --db, --table, --schema)", f.qualifiedTable(), wire.Mask(f.db), f.tableFlags())}
	}
	return err
}

// tableFlags is the --table/--schema part of a suggested command line.
func (f *flags) tableFlags() string {
	var b strings.Builder
	if f.table != store.DefaultTable {
		b.WriteString(" --table " + f.table)
	}
	if f.schema != "" {
		b.WriteString(" --schema " + f.schema)
	}
	return b.String()
}

// notMigrated is store.ErrNotMigrated told with the table it looked for.
type notMigrated struct {
	err error
	msg string
}

func (n notMigrated) Error() string { return n.msg }
func (n notMigrated) Unwrap() error { return n.err }

// qualifiedTable is the table as the messages name it: schema.table or table.
func (f *flags) qualifiedTable() string {
	if f.schema != "" {
		return f.schema + "." + f.table
	}
	return f.table
}
