package natsbox

import (
	"context"
	"os"
	"testing"

	"github.com/reins-run/reins/internal/natsbox/natsserver"
)

// TestMain gives Open its embedded server, as package natsbox/embed does for programs (which
// these tests cannot import: it imports natsbox).
func TestMain(m *testing.M) {
	RegisterServer(func(ctx context.Context, c ServerConfig) (Server, error) {
		var check func(string) (string, *natsserver.Perms, bool)
		if c.Auth != nil {
			check = func(token string) (string, *natsserver.Perms, bool) {
				user, p, ok := c.Auth(token)
				return user, (*natsserver.Perms)(p), ok
			}
		}
		return natsserver.Start(ctx, natsserver.Config{Name: c.Name, StoreDir: c.StoreDir, Host: c.Host, Port: c.Port,
			DontListen: c.DontListen, Auth: check, Logger: c.Logger, Debug: c.Debug, Ready: c.Ready})
	})
	os.Exit(m.Run())
}
