package rewrite

import "testing"

// BenchmarkNoMatch is the cost every query pays for the rules when none
// matches it: one exact, one suffix and one regex rule.
func BenchmarkNoMatch(b *testing.B) {
	rw, err := New([]Rule{
		{From: "api.legacy", To: "web.team-a.svc.cluster.local"},
		{Type: Suffix, From: ".corp", To: ".corp.example"},
		{Type: Regex, From: `^(.+)\.old\.example\.$`, To: "{1}.new.example"},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		rw.Rewrite("www.example.test.")
	}
}
