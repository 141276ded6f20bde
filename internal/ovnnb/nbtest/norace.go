//go:build !race

package nbtest

const raceDetector = false
