//go:build race

package main

// raceEnabled is set when the tests run under the race detector, which
// slows every check by an order of magnitude.
const raceEnabled = true
