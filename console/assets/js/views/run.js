// A run: its graph with the current step, its steps with their stop reasons, what it waits for,
// the timeline of its iterations (from GET /v1/runs/{id}/iterations/{step}/{n}), the live token
// stream and its events, kept live by the run's Server-Sent Events (or, where the server has
// none, by asking again every few seconds).

import {h, replace, fmtTime, fmtDuration, fmtCost, fmtInt, pretty, badge, alert, problemText, FINISHED} from '../dom.js';
import {api, enc} from '../api.js';
import {openStream} from '../sse.js';
import {drawGraph, childNodes, summaryStatus} from '../graph.js';
import {waitsList, waitsKey, signalForm} from './waits.js';

const POLL_MS = 3000;
// TRACE_PAGE is how many events of a run's trace one read asks for (the API's most).
const TRACE_PAGE = 1000;
const ANSWERS = new Set(['continued', 'completed', 'waiting', 'failed', 'timed_out']);

const stepKey = (ev) => (ev.item >= 0 && ev.item !== undefined && ev.item !== null ? `${ev.step}#${ev.item}` : ev.step);
const iterKey = (step, n) => `${step}\u0000${n}`;

export function runView(main, ctx, id) {
  document.title = `Run ${id} · reins`;
  let stopped = false;
  let run = null; // the latest run result (status message or GET)
  let graph = null;
  let stream = null;
  let pollTimer = null;
  let iterTimer = null;
  let lastWaits = null;
  let lastGraphKey = null;
  const iters = new Map(); // iterKey → {step, n, data, state, stale, loading}
  const deltas = new Map(); // iterKey → turn → {text, calls: index → {name, args}}
  const liveBlocks = new Map(); // iterKey → its block in the live log
  const seenEvents = new Set();
  let eventCount = 0;

  const statusEl = h('span', {id: 'run-status'});
  const summary = h('dl', {class: 'summary'});
  const actions = h('div', {class: 'actions', id: 'run-actions'});
  const waitsSec = h('section', {id: 'waits', 'aria-labelledby': 'waits-h', hidden: true},
    h('h2', {id: 'waits-h'}, 'Waiting for a person'));
  const waitsBody = h('div', {});
  waitsSec.append(waitsBody);
  const figure = h('figure', {class: 'graph-box'});
  const current = h('p', {id: 'current-step', 'aria-live': 'polite'});
  const stepsBody = h('tbody', {id: 'steps-body'});
  const liveLog = h('div', {id: 'live-log', class: 'live-log', role: 'log', 'aria-label': 'Live token stream', tabindex: '0'});
  const streamState = h('span', {id: 'stream-state', class: 'muted'}, 'Connecting…');
  const timeline = h('div', {id: 'timeline'});
  const outputSec = h('section', {id: 'output', 'aria-labelledby': 'output-h', hidden: true}, h('h2', {id: 'output-h'}, 'Output'));
  const outputBody = h('div', {});
  outputSec.append(outputBody);
  const eventsBody = h('tbody', {id: 'events-body'});
  const eventsSummary = h('summary', {}, 'Events (0)');
  const msg = h('div', {id: 'run-msg'});

  replace(main,
    h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, h('a', {href: '#/runs'}, 'Runs'), ' / ', h('span', {'aria-current': 'page'}, id)),
    h('h1', {}, 'Run ', h('code', {}, id), ' ', statusEl),
    msg,
    summary,
    actions,
    waitsSec,
    h('section', {id: 'graph', 'aria-labelledby': 'graph-h'}, h('h2', {id: 'graph-h'}, 'Graph'), current, figure,
      h('p', {class: 'legend muted'}, 'Current step: thick outline. Dashed edges are loop edges, labelled with their bound; dotted edges run children.')),
    h('section', {id: 'steps', 'aria-labelledby': 'steps-h'}, h('h2', {id: 'steps-h'}, 'Steps'),
      h('div', {class: 'table-wrap', role: 'region', 'aria-labelledby': 'steps-h', tabindex: '0'},
        h('table', {class: 'steps responsive'},
          h('thead', {}, h('tr', {}, ['Step', 'Status', 'Stop reason', 'Iterations', 'Label', 'Attempts', 'Tokens', 'Cost'].map((c) => h('th', {scope: 'col'}, c)))),
          stepsBody))),
    h('section', {id: 'live', 'aria-labelledby': 'live-h'}, h('h2', {id: 'live-h'}, 'Live token stream'),
      h('p', {class: 'muted'}, 'Model replies of streaming steps as they come. ', streamState), liveLog),
    h('section', {id: 'iterations', 'aria-labelledby': 'iterations-h'}, h('h2', {id: 'iterations-h'}, 'Iterations'),
      h('p', {class: 'muted'}, 'What each iteration proposed, how each call was validated and decided, what it returned, and what it cost.'), timeline),
    outputSec,
    h('section', {id: 'events', 'aria-labelledby': 'events-h'}, h('h2', {id: 'events-h', class: 'visually-hidden'}, 'Events'),
      h('details', {}, eventsSummary,
        h('div', {class: 'table-wrap', role: 'region', 'aria-label': 'Events', tabindex: '0'},
          h('table', {class: 'events'},
            h('thead', {}, h('tr', {}, ['At', 'Event', 'Step', 'Iteration', 'Detail'].map((c) => h('th', {scope: 'col'}, c)))),
            eventsBody)))));

  const stepOf = (key) => (run && run.steps || []).find((st) => st.id === key);
  const activeStatus = (st) => st && (st.status === 'running' || st.status === 'waiting');
  // A child's key is PARENT#ITEM: the parent's node is active while a child is, and the child
  // itself is drawn on the node of what it runs (a parallel branch's step, a map's body).
  let children = childNodes({});
  const runsOn = (node) => (run && run.steps || []).filter((st) => children.nodeOf(st.id) === node.id);
  const graphStatus = (step, node) => {
    const own = step ? stepOf(step) : null;
    const kids = step ? (run && run.steps || []).filter((st) => st.id.startsWith(step + '#')) : [];
    if (kids.some(activeStatus) && !(own && FINISHED.has(own.status))) return kids.find(activeStatus).status;
    const on = runsOn(node);
    return on.length ? summaryStatus([own && own.status, ...on.map((st) => st.status)]) : own ? own.status : '';
  };
  const graphCurrent = (step, node, active) => active.includes(step) || runsOn(node).some(activeStatus);
  const graphNote = (step, node) => runsOn(node).map((st) => `${st.id}: ${st.status}`).join('\n');

  function renderSummary() {
    replace(statusEl, badge(run.status));
    statusEl.dataset.status = run.status;
    const usage = (run.steps || []).reduce((u, st) => {
      const x = st.usage || {};
      u.tokens += (x.input_tokens || 0) + (x.output_tokens || 0);
      u.cost += x.cost_usd || 0;
      u.calls += x.model_calls || 0;
      return u;
    }, {tokens: 0, cost: 0, calls: 0});
    const rows = [
      ['Workflow', run.workflow ? [run.workflow, ' ', h('a', {href: '#/runs?workflow=' + enc(run.workflow), class: 'small'}, '(its runs)')] : '—'],
      ['Status', badge(run.status)],
      ['Path', (run.path || []).length ? (run.path || []).join(' → ') : '—'],
      ['Spent', `${fmtInt(usage.calls)} model calls, ${fmtInt(usage.tokens)} tokens, ${fmtCost(usage.cost)}`],
    ];
    if (run.trace_id) rows.push(['Trace', traceLink(run)]);
    if (run.error) rows.push(['Error', h('span', {class: 'error-text'}, `${run.error.code}${run.error.step ? ' (step ' + run.error.step + ')' : ''}: ${run.error.message}`)]);
    replace(summary, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
  }

  function renderActions() {
    const done = FINISHED.has(run.status);
    const items = [];
    if (!done && ctx.may('cancel')) {
      const out = h('span', {'aria-live': 'polite'});
      const btn = h('button', {type: 'button', class: 'danger', id: 'cancel-run'}, 'Cancel run');
      btn.addEventListener('click', async () => {
        if (!window.confirm(`Cancel run ${id}? It stops within one iteration.`)) return;
        btn.disabled = true;
        try {
          await api.cancel(id, `cancelled from the console by ${ctx.me.name}`);
          replace(out, ' Cancelling…');
          ctx.announce(`Run ${id} is being cancelled.`);
          refreshSoon();
        } catch (err) { replace(out, alert(problemText(err))); btn.disabled = false; }
      });
      items.push(btn, out);
    }
    if (!done && ctx.may('decide')) {
      items.push(h('details', {class: 'signal-box'}, h('summary', {}, 'Send a signal'), signalForm(ctx, id, '', refreshSoon)));
    }
    const key = `${done}|${ctx.may('cancel')}|${ctx.may('decide')}`;
    if (actions.dataset.key === key) return;
    actions.dataset.key = key;
    replace(actions, items);
  }

  function renderWaits() {
    const key = waitsKey(run);
    if (key === lastWaits) return;
    lastWaits = key;
    const waiting = (run.waiting || []).length > 0;
    waitsSec.hidden = !waiting;
    replace(waitsBody, waiting ? waitsList(ctx, run, refreshSoon) : null);
  }

  function renderGraph() {
    if (!graph) { replace(figure, h('p', {class: 'muted'}, 'The server sent no graph for this run.')); return; }
    const active = (run.steps || []).filter(activeStatus).map((st) => st.id.split('#')[0]);
    const key = JSON.stringify((run.steps || []).map((st) => [st.id, st.status]));
    if (key !== lastGraphKey) {
      lastGraphKey = key;
      replace(figure,
        drawGraph(graph, {title: `Graph of run ${id}`, statusOf: graphStatus, isCurrent: (step, node) => graphCurrent(step, node, active), noteOf: graphNote}),
        h('figcaption', {class: 'visually-hidden'}, `The graph of workflow ${run.workflow || ''}.`));
    }
    const curs = (run.steps || []).filter(activeStatus);
    current.textContent = curs.length
      ? 'Current step: ' + curs.map((st) => `${st.id} (${children.runs(st.id) ? children.runs(st.id) + ', ' : ''}${st.status})`).join(', ') + '.'
      : FINISHED.has(run.status) ? `The run has ${run.status.replace('_', ' ')}.` : 'No step runs right now.';
  }

  function renderSteps() {
    replace(stepsBody, (run.steps || []).map((st) => {
      const u = st.usage || {};
      return h('tr', {dataset: {step: st.id, status: st.status}, class: activeStatus(st) ? 'current' : null},
        h('th', {scope: 'row', 'data-label': 'Step'}, h('code', {}, st.id), children.runs(st.id) ? h('span', {class: 'muted'}, ` runs ${children.runs(st.id)}`) : null),
        h('td', {'data-label': 'Status', class: 'status'}, badge(st.status)),
        h('td', {'data-label': 'Stop reason', class: 'stop'},
          st.stop_reason ? h('strong', {}, st.stop_reason) : h('span', {class: 'muted'}, '—'),
          st.stop_detail ? h('span', {class: 'detail'}, ' ', st.stop_detail) : null,
          st.error ? h('span', {class: 'error-text'}, ' ', st.error) : null),
        h('td', {'data-label': 'Iterations', class: 'num'}, String(st.iterations || 0)),
        h('td', {'data-label': 'Label'}, st.label || ''),
        h('td', {'data-label': 'Attempts', class: 'num'}, String(st.attempts || 0)),
        h('td', {'data-label': 'Tokens', class: 'num'}, fmtInt((u.input_tokens || 0) + (u.output_tokens || 0))),
        h('td', {'data-label': 'Cost', class: 'num'}, fmtCost(u.cost_usd)));
    }));
  }

  function renderOutput() {
    const show = FINISHED.has(run.status) && run.output !== undefined && run.output !== null;
    outputSec.hidden = !show;
    if (show) replace(outputBody, h('pre', {class: 'json', tabindex: '0'}, pretty(run.output)));
  }

  function setRun(next) {
    const was = run && run.status;
    run = {...(run || {}), ...next};
    // A result leaves out `waiting` when nothing waits; a status message may leave out the
    // graph and the trace, which stay.
    if (!next.waiting) delete run.waiting;
    if (next.graph) { graph = next.graph; children = childNodes(graph); lastGraphKey = null; }
    renderSummary();
    renderActions();
    renderWaits();
    renderGraph();
    renderSteps();
    renderOutput();
    if (was && was !== run.status) ctx.announce(`Run ${id} is now ${run.status.replace('_', ' ')}.`);
    // The iterations of active steps may have grown; finished ones get a last look.
    for (const st of run.steps || []) {
      for (let n = 1; n <= (st.iterations || 0); n++) want(st.id, n, false);
      if (st.iterations && (activeStatus(st) || FINISHED.has(run.status))) want(st.id, st.iterations, activeStatus(st) || !iters.get(iterKey(st.id, st.iterations))?.final);
    }
    scheduleIterations();
  }

  // --- events

  function addEvent(ev) {
    const key = [ev.type, ev.step, ev.item, ev.activation, ev.iteration, ev.attempt, ev.resume, ev.at, ev.call_id, ev.name, ev.id, ev.nonce].join('|');
    if (seenEvents.has(key)) return;
    seenEvents.add(key);
    eventCount++;
    eventsSummary.textContent = `Events (${eventCount})`;
    const detail = [ev.stop_reason && `stop ${ev.stop_reason}`, ev.label && `label ${ev.label}`, ev.error, ev.by && `by ${ev.by}`,
      ev.call_id && `call ${ev.call_id}`, ev.type === 'decision' ? (ev.approve ? 'approved' : 'denied') : '', ev.message, ev.name && `signal ${ev.name}`,
      ev.reason, (ev.pending || []).map((c) => `waits on ${c.tool} (${c.call_id})`).join(', ')].filter(Boolean).join('; ');
    eventsBody.append(h('tr', {dataset: {type: ev.type}},
      h('td', {}, fmtTime(ev.at)), h('td', {}, ev.type), h('td', {}, ev.step ? stepKey(ev) : ''),
      h('td', {class: 'num'}, ev.iteration ? String(ev.iteration) : ''), h('td', {}, detail)));
    if (ANSWERS.has(ev.type) && ev.step && ev.iteration) want(stepKey(ev), ev.iteration, true);
  }

  // --- iterations

  function want(step, n, stale) {
    const k = iterKey(step, n);
    let it = iters.get(k);
    if (!it) { it = {step, n, data: null, state: 'new', stale: true}; iters.set(k, it); }
    else if (stale) it.stale = true;
  }

  function scheduleIterations() {
    if (iterTimer || stopped) return;
    iterTimer = setTimeout(loadIterations, 150);
  }

  async function loadIterations() {
    iterTimer = null;
    const todo = [...iters.values()].filter((it) => it.stale && !it.loading);
    await Promise.all(todo.map(async (it) => {
      it.stale = false;
      it.loading = true;
      try {
        const data = await api.iteration(id, it.step, it.n);
        it.data = data;
        it.state = 'ok';
        const st = stepOf(it.step);
        it.final = !st || !activeStatus(st) || it.n < st.iterations;
      } catch (err) {
        it.state = err.status === 404 ? 'none' : 'error';
        it.error = err;
        it.final = it.state === 'none' && !activeStatus(stepOf(it.step));
      }
      it.loading = false;
      if (!stopped) renderIteration(it);
    }));
    if ([...iters.values()].some((it) => it.stale) && !stopped) scheduleIterations();
  }

  function stepGroup(step) {
    let group = timeline.querySelector(`section.step-iters[data-step="${CSS.escape(step)}"]`);
    if (!group) {
      group = h('section', {class: 'step-iters', dataset: {step}, 'aria-label': `Iterations of step ${step}`},
        h('h3', {}, 'Step ', h('code', {}, step)), h('ol', {class: 'iters'}));
      // Groups follow the steps' order.
      const order = (run && run.steps || []).map((st) => st.id);
      const after = [...timeline.children].find((g) => order.indexOf(g.dataset.step) > order.indexOf(step));
      timeline.insertBefore(group, after || null);
    }
    return group.querySelector('ol');
  }

  function iterArticle(it) {
    const ol = stepGroup(it.step);
    let li = ol.querySelector(`li[data-n="${it.n}"]`);
    if (!li) {
      li = h('li', {dataset: {n: it.n}});
      const after = [...ol.children].find((x) => Number(x.dataset.n) > it.n);
      ol.insertBefore(li, after || null);
    }
    return li;
  }

  function renderIteration(it) {
    const k = iterKey(it.step, it.n);
    const live = liveText(k);
    if (it.state === 'none' && !live && !activeStatus(stepOf(it.step))) {
      // A step without iteration records (a switch, an approval step): nothing to show.
      const group = timeline.querySelector(`section.step-iters[data-step="${CSS.escape(it.step)}"]`);
      const old = group && group.querySelector(`li[data-n="${it.n}"]`);
      if (old) old.remove();
      if (group && !group.querySelector('li')) group.remove();
      return;
    }
    const li = iterArticle(it);
    const parts = (it.data && it.data.parts) || [];
    const last = parts[parts.length - 1];
    const answer = last ? last.answer : it.state === 'none' || it.state === 'new' ? 'in progress' : it.state;
    let tokens = 0;
    let cost = 0;
    for (const p of parts) {
      const r = p.event.record || {};
      tokens += (r.input_tokens || 0) + (r.output_tokens || 0);
      cost += r.cost_usd || 0;
    }
    const headId = `it-${(it.step + '-' + it.n).replace(/[^A-Za-z0-9_-]/g, '_')}`;
    const article = h('article', {class: 'iteration card', id: headId + '-a', 'aria-labelledby': headId,
      dataset: {step: it.step, n: it.n, answer: last ? last.answer : 'pending', parts: parts.length}},
    h('h4', {id: headId}, `Iteration ${it.n} `, badge(answer.replace(' ', '_')),
      parts.length ? h('span', {class: 'muted costs'}, ` ${fmtInt(tokens)} tokens · ${fmtCost(cost)}`) : null),
    parts.map(partView),
    // The reply as it streams, until the iteration's record (which has all of it) comes.
    live && !parts.length ? h('div', {class: 'streamed'}, h('p', {class: 'muted'}, 'Streaming now:'), h('pre', {class: 'live-text'}, live)) : null,
    it.state === 'error' ? alert(`This iteration could not be read: ${problemText(it.error)}`) : null,
    !parts.length && it.state !== 'error' ? h('p', {class: 'muted'}, 'No answer yet: the iteration is running.') : null,
    parts.some((p) => hasRefs(p.event.record)) ? fullButton(it) : null);
    li.replaceChildren(article);
  }

  function hasRefs(r) {
    if (!r) return false;
    return Boolean((r.proposal && r.proposal.text_ref) || (r.calls || []).some((c) => c.arguments_ref || c.output_ref));
  }

  function fullButton(it) {
    const b = h('button', {type: 'button', class: 'link'}, 'Show the whole texts');
    b.addEventListener('click', async () => {
      b.disabled = true;
      try {
        it.data = await api.iteration(id, it.step, it.n, true);
        renderIteration(it);
      } catch (err) { b.replaceWith(alert(problemText(err))); }
    });
    return b;
  }

  function partView(p) {
    const ev = p.event || {};
    const r = ev.record || {};
    const head = [`${p.answer}`, `attempt ${p.attempt}`];
    if (p.activation > 1) head.push(`activation ${p.activation}`);
    if (p.resume) head.push(`resumed after the decisions (${p.resume})`);
    return h('div', {class: 'part', dataset: {answer: p.answer}},
      h('p', {class: 'part-head'}, head.join(' · '), ' · ', fmtTime(ev.at), r.duration_ns ? ` · ${fmtDuration(r.duration_ns)}` : ''),
      r.recovered ? h('p', {class: 'muted'}, 'Rebuilt from the loop\'s checkpoint: the first answer of this part was lost, and with it its trace and usage.') : null,
      (r.context || []).length ? h('ul', {class: 'context'}, r.context.map((c) => h('li', {}, 'Context: ', c))) : null,
      (r.messages || []).length ? h('div', {class: 'messages'}, h('p', {class: 'label'}, 'Added to the conversation:'), r.messages.map((m) => h('pre', {}, m))) : null,
      r.proposal ? proposalView(r.proposal) : null,
      (r.calls || []).length ? h('ol', {class: 'calls'}, r.calls.map(callView)) : null,
      r.model_calls ? h('p', {class: 'usage'}, `Model: ${r.model_calls} call${r.model_calls > 1 ? 's' : ''}, ${fmtInt(r.input_tokens)} tokens in, ${fmtInt(r.output_tokens)} out, ${fmtCost(r.cost_usd)}`, r.model_ns ? `, ${fmtDuration(r.model_ns)}` : '', '.') : null,
      !ev.record && ev.usage ? h('p', {class: 'usage'}, `Spent: ${fmtInt((ev.usage.input_tokens || 0) + (ev.usage.output_tokens || 0))} tokens, ${fmtCost(ev.usage.cost_usd)}.`) : null,
      (ev.pending || []).length ? h('p', {class: 'pending'}, 'Waits for: ', ev.pending.map((c) => `${c.tool} (call ${c.call_id}) ${c.child ? 'its sub-run' : 'a person\'s decision'}`).join('; '), '.') : null,
      ev.output !== undefined && p.answer === 'completed' ? h('div', {}, h('p', {class: 'label'}, 'Output:'), h('pre', {class: 'json', tabindex: '0'}, pretty(ev.output))) : null,
      (ev.stop_reason || r.stop_reason) ? h('p', {class: 'stop'}, 'Stopped: ', h('strong', {}, ev.stop_reason || r.stop_reason), ' ', ev.stop_detail || r.stop_detail || '') : null,
      ev.error ? h('p', {class: 'error-text'}, 'Error: ', ev.error) : null);
  }

  function proposalView(pr) {
    return h('div', {class: 'proposal', dataset: {kind: pr.kind}},
      h('p', {class: 'label'}, 'Proposal: ', h('strong', {}, (pr.kind || '').replace('_', ' '))),
      pr.text ? h('pre', {class: 'text', tabindex: '0'}, pr.text) : null,
      pr.reason ? h('p', {}, 'Reason: ', pr.reason) : null,
      pr.decision ? h('p', {class: 'validation'}, 'Validation: ', badge(pr.decision), pr.why ? ' ' + pr.why : '') : null);
  }

  function callView(c) {
    return h('li', {class: 'call', dataset: {tool: c.tool, decision: c.decision || '', approval: c.approval || '', executed: c.executed ? 'true' : 'false'}},
      h('p', {class: 'call-head'}, h('strong', {class: 'tool'}, c.tool), ' ', h('span', {class: 'muted'}, `call ${c.id}`), c.duration_ns ? h('span', {class: 'muted'}, ` · ${fmtDuration(c.duration_ns)}`) : null),
      h('p', {class: 'label'}, 'Arguments:'),
      h('pre', {class: 'json', tabindex: '0'}, pretty(c.arguments || '')),
      c.decision ? h('p', {class: 'validation'}, 'Validation: ', badge(c.decision), c.reason ? ' ' + c.reason : '') : null,
      c.approval ? h('p', {class: 'approval'}, 'Human: ', badge(c.approval), c.by ? ` by ${c.by}` : '', c.message ? ` — “${c.message}”` : '') : null,
      c.sub_run ? h('p', {class: 'muted'}, 'Runs as a sub-run; its result comes with the iteration\'s resume.') : null,
      h('p', {class: 'label'}, c.executed ? (c.error ? 'Result (failed):' : 'Result:') : 'Not executed:'),
      c.output || c.error ? h('pre', {class: ['json', c.error && 'error-text'], tabindex: '0'}, pretty(c.output || c.error)) : h('p', {class: 'muted'}, '—'));
  }

  // --- live deltas

  // A delta is a piece of a turn's reply: text, or a piece of a proposed call (its name and
  // id first, then fragments of its arguments' JSON). liveText puts an iteration's together.
  function liveText(k) {
    const turns = deltas.get(k);
    if (!turns) return '';
    const out = [];
    for (const [turn, t] of [...turns].sort((a, b) => a[0] - b[0])) {
      let s = turns.size > 1 ? `[turn ${turn}] ` : '';
      s += t.text;
      for (const [, c] of [...t.calls].sort((a, b) => a[0] - b[0])) s += `${s ? '\n' : ''}→ ${c.name || 'call'} ${c.args}`;
      out.push(s);
    }
    return out.join('\n');
  }

  function addDelta(d) {
    if (!d || !d.step || (!d.text && !d.call_name && !d.arguments && !d.call_id)) return;
    const k = iterKey(d.step, d.iteration || 0);
    if (!deltas.has(k)) deltas.set(k, new Map());
    const turns = deltas.get(k);
    const turn = d.turn || 0;
    if (!turns.has(turn)) turns.set(turn, {text: '', calls: new Map()});
    const t = turns.get(turn);
    t.text += d.text || '';
    if (d.call_name || d.call_id || d.arguments) {
      const idx = d.call_index || 0;
      const c = t.calls.get(idx) || {name: '', args: ''};
      if (d.call_name) c.name = d.call_name;
      c.args += d.arguments || '';
      t.calls.set(idx, c);
    }
    const text = liveText(k);
    let block = liveBlocks.get(k);
    if (!block) {
      block = h('div', {class: 'live-block', dataset: {step: d.step, n: d.iteration || 0}},
        h('p', {class: 'label'}, `${d.step}, iteration ${d.iteration || '?'}:`), h('pre', {class: 'live-text'}));
      liveBlocks.set(k, block);
      liveLog.append(block);
    }
    block.querySelector('pre').textContent = text;
    if (d.iteration) {
      want(d.step, d.iteration, false);
      const it = iters.get(k);
      if (it) {
        const pre = timeline.querySelector(`li[data-n="${d.iteration}"] article[data-step="${CSS.escape(d.step)}"] pre.live-text`);
        if (pre) pre.textContent = text; else renderIteration(it);
      }
    }
  }

  // --- keeping live

  let refreshing = false;
  // traceCursor is where the trace read so far ends: each refresh reads the events after it,
  // a page at a time, so that a long run's trace is read once.
  let traceCursor = '';
  async function refresh() {
    if (refreshing || stopped) return;
    refreshing = true;
    try {
      let full;
      do {
        full = await api.run(id, {trace_limit: TRACE_PAGE, trace_cursor: traceCursor});
        if (stopped) return;
        for (const ev of full.trace || []) addEvent(ev);
        if (full.trace_next_cursor) traceCursor = full.trace_next_cursor;
      } while (full.trace_more);
      setRun(full);
      replace(msg);
    } catch (err) {
      if (!stopped) replace(msg, alert(err.status === 404 ? `There is no run ${id}.` : `The run could not be read: ${problemText(err)}`));
    } finally {
      refreshing = false;
    }
  }

  function refreshSoon() {
    if (stream) return; // its status messages bring the change
    setTimeout(refresh, 300);
  }

  function poll() {
    clearTimeout(pollTimer);
    if (stopped || (run && FINISHED.has(run.status))) return;
    pollTimer = setTimeout(async () => { await refresh(); poll(); }, POLL_MS);
  }

  function connect() {
    stream = openStream(`/v1/runs/${enc(id)}/events`, {
      message(type, data) {
        if (stopped) return;
        if (type === 'event') addEvent(data);
        else if (type === 'status') setRun(data);
        else if (type === 'delta') addDelta(data);
        else if (type === 'end') { streamState.textContent = `The run has ended (${data && data.status || 'finished'}).`; }
        scheduleIterations();
      },
      state(s) {
        const texts = {connecting: 'Connecting…', live: 'Live.', reconnecting: 'The connection broke: reconnecting…', ended: 'The run has ended; the stream is closed.', closed: 'The stream is closed.'};
        if (s !== 'ended' || !streamState.textContent.startsWith('The run has ended')) streamState.textContent = texts[s] || s;
        streamState.dataset.state = s;
        if (s === 'ended') refresh();
      },
      error(err) {
        stream = null;
        if (err.status === 401) return; // the console asks for a token again
        streamState.textContent = `No live events (${err.status}): updating every ${POLL_MS / 1000} s instead.`;
        streamState.dataset.state = 'polling';
        poll();
      },
    });
  }

  (async () => {
    await refresh();
    if (stopped || !run) return;
    if (FINISHED.has(run.status)) { streamState.textContent = 'The run has ended.'; streamState.dataset.state = 'ended'; return; }
    connect();
  })();

  return () => {
    stopped = true;
    if (stream) stream.close();
    clearTimeout(pollTimer);
    clearTimeout(iterTimer);
  };
}

// traceLink is the run's OpenTelemetry trace id, linked to the operator's tracing backend when
// the API gives its address (the operator's [console] trace_url; http and https only).
function traceLink(run) {
  const id = h('code', {class: 'trace-id'}, run.trace_id);
  if (!run.trace_url || !/^https?:\/\//.test(run.trace_url)) return id;
  return [id, ' ', h('a', {href: run.trace_url, target: '_blank', rel: 'noopener noreferrer', class: 'trace-link'}, 'open the trace')];
}
