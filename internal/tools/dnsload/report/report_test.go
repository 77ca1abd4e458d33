package report

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestJSONLine(t *testing.T) {
	in := Result{Sent: 8000, OK: 7997, Failed: 3, Timeouts: 3, FailPct: 0.0375, LongestGap: 156.2, GapAt: 4.5,
		PerSecond: [][2]int{{800, 0}, {797, 3}}, QPSAsked: 800, SecondsAsked: 10, Reconnects: 2}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"sent":8000`, `"longest_gap_ms":156.2`, `"gap_at_s":4.5`, `"per_second":[[800,0],[797,3]]`, `"seconds":10`, `"reconnects":2`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON line %s lacks %s", b, key)
		}
	}
	var out Result
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != in.String() {
		t.Errorf("decoded %q, want %q", out, in)
	}
}

func TestString(t *testing.T) {
	r := Result{Sent: 8000, OK: 8000, SecondsAsked: 10}
	if r.QPS() != 800 {
		t.Errorf("QPS %v, want 800", r.QPS())
	}
	if s := r.String(); strings.Contains(s, "connected again") || !strings.Contains(s, "800 queries/s") {
		t.Errorf("String %q: want 800 queries/s and no reconnects", s)
	}
	r.Reconnects = 3
	if s := r.String(); !strings.Contains(s, "3 sockets connected again") {
		t.Errorf("String %q lacks the reconnects", s)
	}
	if (Result{Sent: 5}).QPS() != 0 {
		t.Error("QPS of a run of no length is not 0")
	}
}
