//go:build e2e

package runner

// Engine processes (this test binary run again) killed by a fault at the moments that matter.
// Heavy tests, under the build tag e2e: go test -tags e2e ./runner -run 'Kill|Crash'.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/fault"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
)

// faultEnv is the variable of the fault injection (fault.Env).
const faultEnv = fault.Env

// childDirEnv tells the test binary it runs as the crashing engine process of a crash test.
const childDirEnv = "REINS_TEST_CRASH_DIR"

// An engine process dies after it published the task of iteration 2 and before it saved the
// state that dispatched it. The next engine, on the same data, decides the redelivered answer
// to iteration 1 again (the same task, stored once; an answer to iteration 2 that came first
// is held back), and the run completes with every iteration dispatched and answered once.
//
// The embedded server dies with the process, so what its consumers had not yet written down is
// lost with it: the engine's consumer may deliver the answer to iteration 1 again at once
// rather than after AckWait, and the worker's consumer may have lost the acknowledgement of
// task 1.
func TestKillBeforeSave(t *testing.T) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		crashingEngine(t, dir)
		return
	}
	dir := t.TempDir()
	crash(t, "TestKillBeforeSave", dir)
	v := newEnvAt(t, dir)
	w := v.Worker("think")
	for want := 2; want <= 3; want++ {
		task := w.Next()
		if task.Iteration != want || task.Attempt != 1 {
			t.Fatalf("task of iteration %d attempt %d, want iteration %d", task.Iteration, task.Attempt, want)
		}
		v.Publish(runtest.Continued(task, `"next"`), "")
	}
	rec := v.Wait("crash-1")
	t.Logf("decided %d, acked %d, held %d, reloads %d", v.eng.stats.decided.Load(), v.eng.stats.acked.Load(), v.eng.stats.held.Load(), v.eng.stats.reloads.Load())
	if sr := rec.Run.Steps["think"]; rec.Run.Status != protocol.RunCompleted || sr.Iteration != 3 || sr.Attempts != 3 {
		t.Fatalf("run %s at iteration %d after %d tasks, want completed at 3 after 3", rec.Run.Status, sr.Iteration, sr.Attempts)
	}
	// Each task was dispatched once: the worker took tasks 2 and 3 and nothing else, and no
	// task is left in the work queue (the worker acknowledged every task it took, which removed
	// it). The consumer's count of unacknowledged deliveries is no measure: when the crash lost
	// the acknowledgement of task 1, the consumer counts task 1 as delivered and unacknowledged
	// (the task itself is gone from the stream) until it next tries to deliver it, after its
	// AckWait, and finds it removed. Before the task stream kept a message (natsbox.KeeperSubject),
	// task 1 was below the stream's first sequence, and the server dropped that entry when it
	// restored the consumer.
	info, err := w.Consumer().Info(v.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left := tasksLeft(t, v, "think"); info.NumPending != 0 || left != 0 {
		t.Fatalf("%d tasks left for the worker, %d in the stream: want each task dispatched once", info.NumPending, left)
	}
}

// tasksLeft returns the number of tasks of handler in REINS_TASKS.
func tasksLeft(t *testing.T, v *env, handler string) uint64 {
	t.Helper()
	subj, err := natsbox.TaskSubject(handler)
	if err != nil {
		t.Fatal(err)
	}
	s, err := v.Box.JetStream().Stream(v.Ctx, natsbox.TasksStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(v.Ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subj]
}

// crash runs test (this test binary's test of that name) as a crashing engine process on the
// data directory dir, and waits for the fault to kill it before its second save.
func crash(t *testing.T, test, dir string) {
	t.Helper()
	crashAt(t, test, dir, "kill-before-save:2")
}

// crashAt is crash with the fault point of fault (REINS_FAULT's value).
func crashAt(t *testing.T, test, dir, fault string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), childDirEnv+"="+dir, faultEnv+"="+fault)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 86 {
		t.Fatalf("the engine process ended with %v, want exit status 86 from the fault:\n%s", err, out)
	}
}

// crashingEngine is the engine process of TestKillBeforeSave: it starts the run, answers
// iteration 1 and waits for the fault to end the process.
func crashingEngine(t *testing.T, dir string) {
	v := crashingEnv(t, dir)
	w := v.Worker("think")
	v.Start(runtest.LoopWorkflow(t, 3), `0`, "crash-1") // save 1
	task := w.Next()
	v.Publish(runtest.Continued(task, `"from 1"`), "") // decided: task 2 published, then killed before save 2 (the save window passed)
	awaitFault(t, v)
}

func crashingEnv(t *testing.T, dir string) *env {
	if os.Getenv(fault.Env) == "" {
		t.Fatal("no fault to inject")
	}
	return newEnvAt(t, dir)
}

func awaitFault(t *testing.T, v *env) {
	ctx, cancel := context.WithTimeout(v.Ctx, 20*time.Second)
	defer cancel()
	<-ctx.Done()
	t.Fatal("the fault did not kill the engine process")
}

// An engine process dies with three decisions of a loop waiting for a save (iterations 1 to 3
// answered, within the save window) as it saves the fourth, which ends the run. The next
// engine decides the four answers, delivered again, on the saved start, and the run ends as it
// would have: completed at iteration 4 after 4 tasks.
func TestKillWithSavesWaiting(t *testing.T) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		v := crashingEnv(t, dir)
		withSaveWindow(v, time.Hour)
		w := v.Worker("think")
		v.Start(runtest.LoopWorkflow(t, 4), `0`, "crash-2") // save 1
		for range 4 {
			v.Publish(runtest.Continued(w.Next(), `"more"`), "") // 3 decisions wait; the 4th ends the run: save 2
		}
		awaitFault(t, v)
		return
	}
	dir := t.TempDir()
	crash(t, "TestKillWithSavesWaiting", dir)
	v := newEnvAt(t, dir)
	rec := v.Wait("crash-2")
	if sr := rec.Run.Steps["think"]; rec.Run.Status != protocol.RunCompleted || sr.Iteration != 4 || sr.Attempts != 4 {
		t.Fatalf("run %s at iteration %d after %d tasks, want completed at 4 after 4", rec.Run.Status, sr.Iteration, sr.Attempts)
	}
}

// An engine process dies at the points where a slot could be lost or granted twice: before the
// save of a queued run's start (its acquire done), before the save of the end of the run that
// holds the slot, and after that save, before its release. The next engine, on the same data,
// finishes what the first began: the queued run holds the slot once, runs once and completes,
// and the bucket ends empty.
func TestConcurrencyCrash(t *testing.T) {
	for _, tc := range []struct{ name, fault string }{
		{"before the save of the queued start", "kill-before-save:2"},
		{"before the save of the end", "kill-before-save:3"},
		{"before the release", "kill-before-release:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			crashAt(t, "TestConcurrencyCrashingEngine", dir, tc.fault)
			v := newEnvAt(t, dir)
			w := v.Worker("serve")
			var task *protocol.Task
			for task == nil {
				got := w.Next()
				switch got.RunID {
				case "k1": // its task was sent again: the crash came before its end was saved
					v.Publish(runtest.Completed(got, `1`), "")
				case "k2":
					task = got
				}
			}
			if r := v.Wait("k1"); r.Run.Status != protocol.RunCompleted {
				t.Fatalf("run k1 %s", r.Run.Status)
			}
			if holding, queued := v.holders("k"); !slices.Equal(holding, []string{"k2"}) || len(queued) != 0 {
				t.Fatalf("holders %v, queue %v: want k2 alone", holding, queued)
			}
			v.Publish(runtest.Completed(task, `2`), "")
			rec := v.Wait("k2")
			if rec.Run.Status != protocol.RunCompleted || rec.Run.Steps["serve"].Attempts != 1 {
				t.Fatalf("run k2 %s after %d tasks, want completed after 1", rec.Run.Status, rec.Run.Steps["serve"].Attempts)
			}
			v.expectReleased()
			if left := tasksLeft(t, v, "serve"); left != 0 {
				t.Fatalf("%d tasks left in the work queue: a run was sent twice", left)
			}
		})
	}
}

// TestConcurrencyCrashingEngine is the engine process of TestConcurrencyCrash: it starts k1
// (save 1: it takes the slot at once), then k2 (save 2: queued), answers k1's task (save 3:
// the end, then its release) and waits for the fault to end the process.
func TestConcurrencyCrashingEngine(t *testing.T) {
	dir := os.Getenv(childDirEnv)
	if dir == "" {
		t.Skip("the engine process of TestConcurrencyCrash")
	}
	v := crashingEnv(t, dir)
	bs := perKey(t, 1)
	v.Start(bs, `{"c":"k"}`, "k1")
	v.waitStatus("k1", protocol.RunRunning)
	v.Start(bs, `{"c":"k"}`, "k2")
	if os.Getenv(fault.Env) == "kill-before-save:2" {
		awaitFault(t, v) // k1's task waits for the next engine's worker
		return
	}
	v.waitStatus("k2", protocol.RunQueued)
	v.Publish(runtest.Completed(v.Worker("serve").Next(), `1`), "")
	awaitFault(t, v)
}
