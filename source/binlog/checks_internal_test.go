package binlog

import (
	"strings"
	"testing"
)

// Each setting the source cannot work with is refused in one line naming
// the fix; the local server's settings pass.
func TestSettingsCheck(t *testing.T) {
	good := settings{Version: "10.11.19-MariaDB-log", LogBin: true, Format: "ROW", Image: "FULL", Metadata: "FULL", Checksum: "CRC32", ServerID: 1}
	if err := good.check(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		change func(*settings)
		want   string
	}{
		{func(s *settings) { s.Version = "8.0.36" }, "use --source poll on MySQL"},
		{func(s *settings) { s.LogBin = false }, "set log_bin"},
		{func(s *settings) { s.Format = "MIXED" }, "SET GLOBAL binlog_format = 'ROW'"},
		{func(s *settings) { s.Image = "MINIMAL" }, "SET GLOBAL binlog_row_image = 'FULL'"},
		{func(s *settings) { s.ServerID = 0 }, "set server_id"},
		{func(s *settings) { s.Checksum = "XXH" }, "SET GLOBAL binlog_checksum = 'CRC32'"},
	} {
		st := good
		c.change(&st)
		err := st.check()
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %v; want one line naming %q", st, err, c.want)
		}
	}
}
