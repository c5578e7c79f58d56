package natsbox

import (
	"os"
	"testing"

	"github.com/reins-run/reins/internal/natsbox/natsserver"
)

// TestMain gives Open its embedded server, as package natsbox/embed does for programs (which
// these tests cannot import: it imports natsbox).
func TestMain(m *testing.M) {
	RegisterServer(natsserver.Start)
	os.Exit(m.Run())
}
