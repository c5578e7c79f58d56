//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package natsbox

// dirLock does nothing on systems without flock: two embedded servers on one data directory are
// not detected there.
type dirLock struct{}

func lockDir(string) (*dirLock, error) { return &dirLock{}, nil }

func (*dirLock) unlock() error { return nil }
