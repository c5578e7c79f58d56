//go:build race

package loop_test

const raceEnabled = true
