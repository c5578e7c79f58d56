package loop

import "context"

// StopIfSpent stops the run, as the next Step would before calling the model, when a budget is
// already spent: ctx done, the wall clock, iterations, tokens or cost. It reports whether the run
// has stopped (then or earlier). A caller that runs one iteration per message, as the durable
// engine's agent steps do, calls it after Step, so that the run ends with its own stop reason in
// the iteration that spent the budget instead of in one more message that would only stop it.
// A run that waits for child runs is not stopped: their results come first.
func (r *Run) StopIfSpent(ctx context.Context) bool {
	if r.st.Stopped() {
		return true
	}
	if r.st.AwaitingChildren() {
		return false // the children are under way: their results come first
	}
	return r.checkBudgets(ctx, r.deadline())
}
