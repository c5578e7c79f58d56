package client_test

import (
	"testing"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/runner"
)

// env is an embedded NATS server with a client (runtest.Env) and an engine.
type env struct {
	*runtest.Env
	eng  *runner.Engine
	stop func()
}

// newEnv opens an embedded server in a temporary directory and starts an engine on it.
func newEnv(t testing.TB) *env {
	t.Helper()
	v := &env{Env: runtest.New(t)}
	v.eng, v.stop = v.startEngine()
	return v
}

// startEngine starts another engine on the box and returns it with the function that stops it
// (also called at cleanup).
func (v *env) startEngine() (*runner.Engine, func()) {
	v.T.Helper()
	eng, err := runner.New(runner.Config{Conn: (*conn.Conn)(v.Box), AckWait: runtest.AckWait, Logger: runtest.Logger(v.T)})
	if err != nil {
		v.T.Fatal(err)
	}
	return eng, v.Go(eng.Run, eng.Ready())
}
