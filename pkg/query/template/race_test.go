//go:build race

package template

// raceEnabled: the tests run with -race, whose sync.Pool drops a fourth of
// what is put back on purpose; regexp keeps its matchers in one, so a
// match may allocate a matcher that a build without -race reuses.
const raceEnabled = true
