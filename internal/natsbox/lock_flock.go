//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package natsbox

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// dirLock is an exclusive advisory lock (flock) on a file of the data directory, so that two
// embedded servers never share a file store. The kernel releases it if the process dies.
type dirLock struct {
	f    *os.File
	once sync.Once
	err  error
}

func lockDir(path string) (*dirLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("natsbox: lock the data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: another reins process (or Box) runs an embedded NATS server on it (lock %s); stop it, or connect to that server with its URL", ErrDataDirLocked, path)
		}
		return nil, fmt.Errorf("natsbox: lock the data directory (%s): %w", path, err)
	}
	return &dirLock{f: f}, nil
}

// unlock releases the lock; it is idempotent.
func (l *dirLock) unlock() error {
	l.once.Do(func() { l.err = l.f.Close() })
	return l.err
}
