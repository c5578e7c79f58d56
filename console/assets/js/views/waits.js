// What a waiting run waits for, and the forms that answer it: a decision on each pending call
// (what it would do: its tool and arguments) or on an approval step, input for a step paused on
// needs_human, a signal for a wait_event step. Only a principal who may decide gets the
// buttons; the server checks again, and its 403 is shown where the button was.

import {h, replace, fmtTime, pretty, alert, problemText} from '../dom.js';
import {api} from '../api.js';

let forms = 0;

function decisionForm(ctx, runId, call, what, onDone) {
  const n = ++forms;
  const msg = h('textarea', {id: `msg-${n}`, name: 'message', rows: 2, class: 'message', dataset: {call}});
  const out = h('div', {class: 'decision-result', 'aria-live': 'polite'});
  const approve = h('button', {type: 'button', class: 'approve', dataset: {action: 'approve', call}}, 'Approve');
  const deny = h('button', {type: 'button', class: 'deny', dataset: {action: 'deny', call}}, 'Deny');
  approve.setAttribute('aria-label', `Approve ${what}`);
  deny.setAttribute('aria-label', `Deny ${what}`);
  const decide = async (decision) => {
    approve.disabled = deny.disabled = true;
    replace(out, h('p', {role: 'status'}, decision === 'approve' ? 'Approving…' : 'Denying…'));
    try {
      const {status, data: res} = await api.decide(runId, call, decision, msg.value.trim());
      const names = ((res && res.decided) || []).map((d) => d.tool || d.step).filter(Boolean).join(', ');
      let done = `${decision === 'approve' ? 'Approved' : 'Denied'}${names ? ': ' + names : ''}.`;
      if (status === 202) done += ' The engine has not taken it yet; the run shows it when it does.';
      replace(out, h('p', {role: 'status', class: 'ok', dataset: {decided: decision}}, done));
      ctx.announce(`${done} Run ${runId}.`);
      onDone && onDone();
    } catch (err) {
      let text = problemText(err);
      if (err.status === 403) text = `You may not decide this: ${err.problem.detail || 'the server refused it'}`;
      else if (err.status === 404 || err.status === 409) text = `Nothing to decide any more: ${err.problem.detail || 'the call is no longer waiting'}`;
      replace(out, alert(text));
      approve.disabled = deny.disabled = false;
    }
  };
  approve.addEventListener('click', () => decide('approve'));
  deny.addEventListener('click', () => decide('deny'));
  return h('div', {class: 'decide'},
    h('div', {class: 'field'}, h('label', {for: msg.id}, 'Message (optional)'), msg),
    h('div', {class: 'buttons'}, approve, deny),
    out);
}

function cannotDecide(ctx) {
  return h('p', {class: 'muted no-decide'}, `${ctx.me ? ctx.me.name : 'You'} may look but not decide: deciding needs the approver role.`);
}

function parseLoose(text) {
  const t = text.trim();
  if (t === '') return null;
  try { return JSON.parse(t); } catch { return t; }
}

function resumeForm(ctx, runId, step, onDone) {
  const n = ++forms;
  const input = h('textarea', {id: `resume-${n}`, rows: 3, name: 'input'});
  const out = h('div', {'aria-live': 'polite'});
  const form = h('form', {class: 'resume'},
    h('div', {class: 'field'}, h('label', {for: input.id}, 'Your answer (JSON, or plain text)'), input),
    h('button', {type: 'submit'}, 'Send answer'), out);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await api.resume(runId, parseLoose(input.value), step);
      replace(out, h('p', {role: 'status', class: 'ok'}, 'Answer sent.'));
      onDone && onDone();
    } catch (err) { replace(out, alert(problemText(err))); }
  });
  return form;
}

// signalForm sends an event to a run; event is the name a wait_event step waits for, or ''.
export function signalForm(ctx, runId, event, onDone) {
  const n = ++forms;
  const name = h('input', {id: `sig-name-${n}`, type: 'text', name: 'event', value: event || '', required: true, autocomplete: 'off', spellcheck: 'false'});
  const data = h('textarea', {id: `sig-data-${n}`, rows: 2, name: 'data'});
  const out = h('div', {'aria-live': 'polite'});
  const form = h('form', {class: 'signal'},
    h('div', {class: 'field'}, h('label', {for: name.id}, 'Event'), name),
    h('div', {class: 'field'}, h('label', {for: data.id}, 'Data (JSON, or plain text)'), data),
    h('button', {type: 'submit'}, 'Send signal'), out);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await api.signal(runId, name.value.trim(), parseLoose(data.value));
      replace(out, h('p', {role: 'status', class: 'ok'}, `Signal ${name.value.trim()} sent.`));
      ctx.announce(`Signal ${name.value.trim()} sent to run ${runId}.`);
      onDone && onDone();
    } catch (err) { replace(out, alert(problemText(err))); }
  });
  return form;
}

// waitsList shows every wait of run (a run result with `waiting`).
export function waitsList(ctx, run, onDone) {
  const waits = run.waiting || [];
  const canDecide = ctx.may('decide');
  const items = [];
  for (const w of waits) {
    const until = w.until ? h('span', {class: 'muted'}, ' Until ', fmtTime(w.until), '.') : null;
    if (w.pending && w.pending.length) {
      for (const c of w.pending) {
        const head = h('p', {class: 'what'},
          'Step ', h('code', {}, w.step), c.child ? ' runs ' : ' would call ', h('strong', {class: 'tool'}, c.tool),
          ' ', h('span', {class: 'muted'}, `(call ${c.call_id})`), c.child ? ' as a sub-run' : ' with:');
        items.push(h('li', {class: 'wait card', dataset: {run: run.run_id, step: w.step, call: c.call_id, tool: c.tool}},
          head,
          h('pre', {class: 'args', tabindex: '0', 'aria-label': `Arguments of ${c.tool}`}, pretty(c.arguments)),
          until,
          c.child ? h('p', {class: 'muted'}, 'Its sub-run decides; no person does.')
            : canDecide ? decisionForm(ctx, run.run_id, c.call_id, `${c.tool} (call ${c.call_id}) of run ${run.run_id}`, onDone) : cannotDecide(ctx)));
      }
    } else if (w.wait === 'approval') {
      items.push(h('li', {class: 'wait card', dataset: {run: run.run_id, step: w.step, call: w.step}},
        h('p', {class: 'what'}, 'Approval step ', h('code', {}, w.step), ' asks:'),
        h('blockquote', {class: 'prompt'}, w.prompt || '(no question)'),
        until,
        canDecide ? decisionForm(ctx, run.run_id, w.step, `step ${w.step} of run ${run.run_id}`, onDone) : cannotDecide(ctx)));
    } else if (w.wait === 'input') {
      items.push(h('li', {class: 'wait card', dataset: {run: run.run_id, step: w.step}},
        h('p', {class: 'what'}, 'Step ', h('code', {}, w.step), ' needs a person\'s answer.'),
        w.prompt ? h('blockquote', {class: 'prompt'}, w.prompt) : null,
        until,
        canDecide ? resumeForm(ctx, run.run_id, w.step, onDone) : cannotDecide(ctx)));
    } else if (w.wait === 'event') {
      items.push(h('li', {class: 'wait card', dataset: {run: run.run_id, step: w.step, event: w.event || ''}},
        h('p', {class: 'what'}, 'Step ', h('code', {}, w.step), ' waits for the signal ', h('code', {}, w.event || '?'), '.'),
        until,
        canDecide ? signalForm(ctx, run.run_id, w.event, onDone) : cannotDecide(ctx)));
    } else {
      items.push(h('li', {class: 'wait card', dataset: {run: run.run_id, step: w.step}},
        h('p', {class: 'what'}, 'Step ', h('code', {}, w.step), ` waits (${w.wait}).`), until));
    }
  }
  return h('ul', {class: 'waits'}, items);
}

// waitsKey identifies what a run waits for, to redraw its forms only when that changes (a
// redraw would lose a message being typed).
export function waitsKey(run) {
  return JSON.stringify((run.waiting || []).map((w) => [w.step, w.wait, w.prompt, w.event, (w.pending || []).map((c) => c.call_id)]));
}
