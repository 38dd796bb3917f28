package eventrule

import "testing"

func TestCheckText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    string
		want TextProblem
		at   int
	}{
		{"", TextOK, -1}, {"OrderPaid", TextOK, -1}, {"a b ü € 😀 \u00a0 \u00ff \ufffd \U0010fffd", TextOK, -1},
		{"\x00", TextControl, 0}, {"a\x1f", TextControl, 1}, {"a\tb", TextControl, 1}, {"\x7f", TextControl, 0},
		{"ab\u0080", TextControl, 2}, {"\u009f", TextControl, 0},
		{"\ufdd0", TextNoncharacter, 0}, {"\ufdef", TextNoncharacter, 0}, {"x\ufffe", TextNoncharacter, 1}, {"\uffff", TextNoncharacter, 0},
		{"\U0001fffe", TextNoncharacter, 0}, {"\U0010ffff", TextNoncharacter, 0},
		{"a\xff", TextInvalidUTF8, 1}, {"\xed\xa0\x80", TextInvalidUTF8, 0}, // a surrogate
	} {
		if p, _, at := CheckText(tc.s); p != tc.want || at != tc.at {
			t.Errorf("CheckText(%q) = %v at %d, want %v at %d", tc.s, p, at, tc.want, tc.at)
		}
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	for tr, want := range map[Transport]string{All: "all transports", NATS: "NATS", NATS | HTTP: "NATS and HTTP", Kafka | AMQP | HTTP: "Kafka, AMQP and HTTP", 0: "no transport"} {
		if got := tr.Names(); got != want {
			t.Errorf("Names(%b) = %q, want %q", tr, got, want)
		}
	}
}

func TestRulesAreLowerCaseAndOwned(t *testing.T) {
	t.Parallel()
	for _, r := range Rules {
		for i := 0; i < len(r.Name); i++ {
			if c := r.Name[i]; 'A' <= c && c <= 'Z' {
				t.Errorf("rule %q is not lower-case", r.Name)
			}
		}
		if r.Owners == 0 || r.Why == "" || r.Fix == "" {
			t.Errorf("rule %q lacks an owner, a reason or a fix", r.Name)
		}
	}
}
