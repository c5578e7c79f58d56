// The approvals inbox: every waiting run and what it waits for — each pending call with its tool
// and arguments (what it would do), approval steps with their question — with approve and deny
// for the principals who may decide.

import {h, replace, fmtTime, alert, problemText} from '../dom.js';
import {api, enc} from '../api.js';
import {waitsList, waitsKey} from './waits.js';

const POLL_MS = 4000;
const MAX_PAGES = 5;

export function approvalsView(main, ctx) {
  document.title = 'Approvals · reins';
  let stopped = false;
  let timer = null;
  const cards = new Map(); // run id → {el, key}
  const list = h('div', {id: 'approvals', class: 'inbox'});
  const msg = h('div', {id: 'approvals-msg'});
  const count = h('p', {id: 'approvals-count', 'aria-live': 'polite', class: 'muted'}, 'Reading the waiting runs…');
  replace(main,
    h('h1', {}, 'Approvals'),
    h('p', {}, 'Runs that wait for a person, and what each pending call would do if approved.',
      ctx.may('decide') ? '' : ` You (${ctx.me.name}) may look but not decide: deciding needs the approver role.`),
    count, msg, list);

  async function load() {
    clearTimeout(timer);
    try {
      let runs = [];
      let cursor = '';
      for (let i = 0; i < MAX_PAGES; i++) {
        const res = await api.runs({status: 'waiting', limit: 100, cursor});
        runs = runs.concat(res.runs || []);
        if (!res.next_cursor) break;
        cursor = res.next_cursor;
      }
      const full = await Promise.all(runs.map((r) => api.run(r.run_id, {trace_limit: 1}).then((x) => ({...r, ...x}), () => null)));
      if (stopped) return;
      const waiting = full.filter((r) => r && r.status === 'waiting' && (r.waiting || []).length);
      const ids = new Set(waiting.map((r) => r.run_id));
      for (const [id, c] of cards) if (!ids.has(id)) { c.el.remove(); cards.delete(id); }
      let calls = 0;
      let prev = null;
      for (const r of waiting) {
        calls += r.waiting.reduce((n, w) => n + Math.max(1, (w.pending || []).length), 0);
        const key = waitsKey(r);
        let c = cards.get(r.run_id);
        // A card is redrawn only when what its run waits for changed: a redraw would lose a
        // message being typed.
        if (!c || c.key !== key) {
          const el = h('section', {class: 'run-waits', dataset: {run: r.run_id}, 'aria-labelledby': `aw-${r.run_id}`},
            h('h2', {id: `aw-${r.run_id}`}, 'Run ', h('a', {href: '#/runs/' + enc(r.run_id)}, r.run_id)),
            h('p', {class: 'muted'}, `Workflow ${r.workflow || '?'} · started `, fmtTime(r.started_at)),
            waitsList(ctx, r, () => setTimeout(load, 300)));
          if (c) c.el.replaceWith(el); else list.insertBefore(el, prev ? prev.nextSibling : list.firstChild);
          c = {el, key};
          cards.set(r.run_id, c);
        }
        prev = c.el;
      }
      count.textContent = waiting.length
        ? `${waiting.length} run${waiting.length > 1 ? 's' : ''} wait${waiting.length > 1 ? '' : 's'} for a person: ${calls} pending.`
        : 'Nothing waits for a person.';
      replace(msg);
    } catch (err) {
      if (!stopped) replace(msg, alert(`The waiting runs could not be read: ${problemText(err)}`));
    }
    if (!stopped) timer = setTimeout(load, POLL_MS);
  }
  load();
  return () => { stopped = true; clearTimeout(timer); };
}
