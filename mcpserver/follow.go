package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
)

// approvalSchema is what an elicitation for a run waiting for approval asks of a person: a
// decision, and what to tell the run with it.
var approvalSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"approve": map[string]any{"type": "boolean", "description": "true approves, false denies"},
		"message": map[string]any{"type": "string", "description": "what the run is told with the decision (optional)"},
	},
	"required": []string{"approve"},
}

// follower follows a run for a host's session while it lasts: a progress notification per
// iteration when the call had a progress token, and, when the host declared elicitation, a
// question to a person per wait for approval, whose answer is the principal's decision. The
// engine still judges each decision: the host's answer is an approval as the principal, no more.
type follower struct {
	s        *Server
	p        operator.Principal
	c        *client.Client
	runID    string
	progress func(*protocol.Event) // nil: no progress token
	ss       *mcp.ServerSession    // nil: the host cannot be asked

	asked  map[string]bool // the waits asked about, by target
	askCtx context.Context // ends with the follow: a question of an ended run is withdrawn
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newFollower returns the follower of run runID for session ss (nil when it has nothing to do).
func (s *Server) newFollower(ctx context.Context, p operator.Principal, ss *mcp.ServerSession, runID string, token any) *follower {
	if ss == nil {
		return nil
	}
	f := &follower{s: s, p: p, c: s.cfg.As(p), runID: runID, asked: map[string]bool{}}
	if token != nil {
		f.progress = s.progress(ctx, ss, token)
	}
	if ip := ss.InitializeParams(); ip != nil && ip.Capabilities != nil && ip.Capabilities.Elicitation != nil {
		f.ss = ss
	}
	if f.progress == nil && f.ss == nil {
		return nil
	}
	f.askCtx, f.cancel = context.WithCancel(ctx)
	return f
}

// see takes one update of the run's watch.
func (f *follower) see(ctx context.Context, u client.Update) {
	if u.Event != nil && f.progress != nil {
		f.progress(u.Event)
	}
	if u.Record == nil || f.ss == nil || u.Record.Run.Status != protocol.RunWaiting {
		return
	}
	res, err := f.c.Result(ctx, u.Record)
	if err != nil {
		f.s.cfg.Log.Warn("mcp: the waits of a run could not be read", "run", f.runID, "err", err)
		return
	}
	for _, q := range questions(f.runID, u.Record.Run.Workflow, res.Waiting) {
		if f.asked[q.target] {
			continue
		}
		f.asked[q.target] = true
		f.wg.Go(func() { f.ask(f.askCtx, q) })
	}
}

// question is one elicitation: what it says, and what its answer decides.
type question struct {
	target, message string
}

// questions returns the questions of the waits for approval of a run: one per pending call of
// an agent step, one per approval step.
func questions(runID, wf string, waits []protocol.WaitResult) []question {
	var out []question
	for _, w := range waits {
		if w.Wait != protocol.WaitApproval {
			continue
		}
		if len(w.Pending) == 0 {
			out = append(out, question{w.Step, fmt.Sprintf("Run %s of workflow %s waits at step %s for approval: %s", runID, wf, w.Step, w.Prompt)})
			continue
		}
		for _, pc := range w.Pending {
			if pc.Child != nil {
				continue
			}
			args := strings.TrimSpace(string(pc.Arguments))
			if args == "" {
				args = "{}"
			}
			out = append(out, question{pc.CallID, fmt.Sprintf("Run %s of workflow %s waits at step %s for approval of the call %s of tool %s with arguments %s", runID, wf, w.Step, pc.CallID, pc.Tool, args)})
		}
	}
	return out
}

// ask asks the host about q and decides as the principal what the person answered; a host
// that declines or cancels, or a decision the engine refuses, leaves the run waiting for
// someone else (the console, reins approve).
func (f *follower) ask(ctx context.Context, q question) {
	res, err := f.ss.Elicit(ctx, &mcp.ElicitParams{Message: q.message, RequestedSchema: approvalSchema})
	log := f.s.cfg.Log.With("run", f.runID, "target", q.target, "principal", f.p.Name)
	if err != nil {
		if ctx.Err() == nil {
			log.Info("mcp: the host was not asked to approve; the run keeps waiting", "err", err)
		}
		return
	}
	if res.Action != "accept" {
		log.Info("mcp: the host did not answer the approval; the run keeps waiting", "action", res.Action)
		return
	}
	approve, _ := res.Content["approve"].(bool)
	msg, _ := res.Content["message"].(string)
	decide := f.c.Deny
	if approve {
		decide = f.c.Approve
	}
	if err := decide(ctx, f.runID, q.target, msg); err != nil {
		log.Warn("mcp: the host's answer was not taken; the run keeps waiting", "approve", approve, "err", err)
	}
}

// wait withdraws the questions not answered yet, and waits for them.
func (f *follower) wait() {
	if f != nil {
		f.cancel()
		f.wg.Wait()
	}
}

// followTask follows the task of run runID for session ss (a task-augmented call's), until the
// run ends or ctx does: the session's end.
func (s *Server) followTask(ctx context.Context, p operator.Principal, ss *mcp.ServerSession, c created) {
	f := s.newFollower(ctx, p, ss, c.runID, c.progress)
	if f == nil {
		return
	}
	defer f.wait()
	if _, err := s.await(ctx, f.c, c.runID, f); err != nil && ctx.Err() == nil {
		s.cfg.Log.Warn("mcp: a task's run could not be followed", "run", c.runID, "err", err)
	}
}

// created is a task a task-augmented tools/call created: its run, and the call's progress
// token (nil for none).
type created struct {
	runID    string
	progress any
}

// progressToken returns the progress token of a request's _meta (nil for none).
func progressToken(meta map[string]any) any {
	t := meta["progressToken"]
	switch t.(type) {
	case string, float64, json.Number:
		return t
	}
	return nil
}
