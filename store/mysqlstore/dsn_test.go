package mysqlstore

import (
	"net/url"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

func TestDSN(t *testing.T) {
	tests := []struct {
		url  string
		want string // the driver DSN; "" when an error is expected
		err  string // part of the error
	}{
		{url: "mysql://root@127.0.0.1:3306/test",
			want: "root@tcp(127.0.0.1:3306)/test?interpolateParams=true&parseTime=true&timeout=10s&maxAllowedPacket=0&time_zone=%27%2B00%3A00%27"},
		{url: "mysql://u:p%40ss%2Fw:rd@db.example:3307/shop?tls=skip-verify&timeout=3s",
			want: "u:p@ss/w:rd@tcp(db.example:3307)/shop?interpolateParams=true&parseTime=true&timeout=3s&tls=skip-verify&maxAllowedPacket=0&time_zone=%27%2B00%3A00%27"},
		{url: "mariadb://u@[::1]/d", want: "u@tcp([::1]:3306)/d?interpolateParams=true&parseTime=true&timeout=10s&maxAllowedPacket=0&time_zone=%27%2B00%3A00%27"},
		{url: "mysql:///d", want: "tcp(127.0.0.1:3306)/d?interpolateParams=true&parseTime=true&timeout=10s&maxAllowedPacket=0&time_zone=%27%2B00%3A00%27"},
		{url: "mysql://u@localhost/d?socket=/run/mysqld/mysqld.sock", want: "u@unix(/run/mysqld/mysqld.sock)/d?interpolateParams=true&parseTime=true&timeout=10s&maxAllowedPacket=0&time_zone=%27%2B00%3A00%27"},
		{url: "mysql://u@h/d?parseTime=false&interpolateParams=false&time_zone=%27SYSTEM%27&loc=Europe%2FBerlin",
			want: "u@tcp(h:3306)/d?loc=Europe%2FBerlin&timeout=10s&maxAllowedPacket=0&time_zone=%27SYSTEM%27"},
		{url: "mysql://u@h/d?sql_mode=%27ANSI_QUOTES%27", want: "u@tcp(h:3306)/d?interpolateParams=true&parseTime=true&timeout=10s&maxAllowedPacket=0&sql_mode=%27ANSI_QUOTES%27&time_zone=%27%2B00%3A00%27"},
		{url: "postgres://u@h/d", err: `scheme "postgres" is not mysql`},
		{url: "u@h:3306/d", err: "bad database URL"},
		{url: "//u@h/d", err: "no scheme"},
		{url: "mysql:u@h/d", err: "expected //"},
		{url: "mysql://u:secret@h:99999/d", err: "out of range"},
		{url: "mysql://u:secret@h:port/d", err: "invalid port"},
		{url: "mysql://u@h/a/b", err: "contains /"},
		{url: "mysql://u@h/d?parseTime=maybe", err: "parameter"},
		{url: "mysql://u@h/d?timeout=1s&timeout=2s", err: "given 2 times"},
		{url: "mysql://u@h:3306/d?socket=/s", err: "both a port and socket"},
		{url: "mysql://:secret@h/d", err: "password without user"},
		{url: "mysql://u@h/d#frag", err: "fragment"},
		{url: "mysql://u:se cret\x7f@h/d", err: "bad database URL"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			got, err := DSN(tt.url)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("DSN(%q) = %q, %v; want an error containing %q", tt.url, got, err, tt.err)
				}
				if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "\n") {
					t.Errorf("error %q shows the password or spans lines", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("DSN(%q) = %q, %v; want %q", tt.url, got, err, tt.want)
			}
		})
	}
}

// FuzzDSN: the URL parser never panics, never leaks a password into an
// error, and what it accepts the driver parses back to the same user,
// password, address and database.
func FuzzDSN(f *testing.F) {
	for _, s := range []string{
		"mysql://root@127.0.0.1:3306/test",
		"mysql://u:p%40ss@h:1/d?tls=true&readTimeout=5s",
		"mariadb://u@[::1]/d?socket=/tmp/x.sock",
		"mysql://u:p@h/d?charset=utf8mb4&collation=utf8mb4_bin&loc=Local",
		"mysql://%zz@h/d", "mysql://u@h/d?x=%27a%2Fb%27", "mysql:///", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		cfg, err := parseURL(raw)
		if err != nil {
			msg := strings.TrimSuffix(err.Error(), "; "+urlForm)
			if strings.Contains(msg, "\n") {
				t.Fatalf("multi-line error %q", msg)
			}
			if u, perr := url.Parse(raw); perr == nil && u.User != nil {
				if pass, ok := u.User.Password(); ok && len(pass) >= 4 && strings.Contains(msg, pass) {
					t.Fatalf("error %q shows the password %q", msg, pass)
				}
			}
			return
		}
		back, err := mysql.ParseDSN(cfg.FormatDSN())
		if err != nil {
			t.Fatalf("DSN(%q) = %q, which the driver refuses: %v", raw, cfg.FormatDSN(), err)
		}
		if back.User != cfg.User || back.Passwd != cfg.Passwd || back.Addr != cfg.Addr || back.Net != cfg.Net || back.DBName != cfg.DBName {
			t.Fatalf("DSN(%q) = %q parses back as user %q pass %q %s(%s)/%q; want user %q pass %q %s(%s)/%q",
				raw, cfg.FormatDSN(), back.User, back.Passwd, back.Net, back.Addr, back.DBName, cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName)
		}
		if back.ParseTime != cfg.ParseTime || back.Timeout != cfg.Timeout && cfg.Timeout > 0 {
			t.Fatalf("DSN(%q) lost settings: parseTime %v→%v timeout %v→%v", raw, cfg.ParseTime, back.ParseTime, cfg.Timeout, back.Timeout)
		}
	})
}
