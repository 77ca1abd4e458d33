//go:build !race

package template

const raceEnabled = false
