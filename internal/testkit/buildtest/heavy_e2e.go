//go:build e2e

package buildtest

// Heavy is true under the build tag e2e, the full suite's: a test may keep its largest cases
// (values of 20 MiB, a hundred thousand random trajectories) for it, and run the smaller ones in
// the quick suite (docs/testing.md).
const Heavy = true
