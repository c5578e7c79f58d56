// The runs list: newest first, filtered by status and workflow, a page at a time, its statuses
// kept live by asking again every few seconds.

import {h, replace, fmtTime, badge, alert, problemText} from '../dom.js';
import {api} from '../api.js';

export const STATUSES = ['queued', 'running', 'waiting', 'completed', 'failed', 'cancelled', 'timed_out'];
const POLL_MS = 3000;

export function runsView(main, ctx, q) {
  document.title = 'Runs · reins';
  const status = q.get('status') || '';
  const workflow = q.get('workflow') || '';
  const limit = /^[1-9][0-9]{0,2}$/.test(q.get('limit') || '') && Number(q.get('limit')) <= 500 ? q.get('limit') : '20';
  let cursors = ['']; // the cursor of each page seen, to go back
  let page = 0;
  let timer = null;
  let stopped = false;
  let known = new Map(); // run id → status, to announce changes
  let ctrl = null;

  const statusSel = h('select', {id: 'f-status', name: 'status'},
    h('option', {value: ''}, 'any'),
    STATUSES.map((s) => h('option', {value: s, selected: s === status}, s.replace('_', ' '))));
  const wfInput = h('input', {id: 'f-workflow', name: 'workflow', type: 'text', value: workflow, list: 'wf-names', autocomplete: 'off', spellcheck: 'false'});
  const wfList = h('datalist', {id: 'wf-names'});
  const sizes = ['10', '20', '50', '100'];
  if (!sizes.includes(limit)) sizes.unshift(limit); // a size the address asks for
  const limitSel = h('select', {id: 'f-limit', name: 'limit'}, sizes.map((n) => h('option', {value: n, selected: n === limit}, n)));
  const form = h('form', {class: 'filters', role: 'search', 'aria-label': 'Filter runs'},
    h('div', {class: 'field'}, h('label', {for: 'f-status'}, 'Status'), statusSel),
    h('div', {class: 'field'}, h('label', {for: 'f-workflow'}, 'Workflow'), wfInput, wfList),
    h('div', {class: 'field'}, h('label', {for: 'f-limit'}, 'Per page'), limitSel),
    h('button', {type: 'submit'}, 'Apply'),
    (status || workflow) ? h('a', {href: '#/runs', class: 'button-like'}, 'Clear filters') : null);
  const apply = () => {
    const p = new URLSearchParams();
    if (statusSel.value) p.set('status', statusSel.value);
    if (wfInput.value.trim()) p.set('workflow', wfInput.value.trim());
    if (limitSel.value !== '20') p.set('limit', limitSel.value);
    const qs = p.toString();
    ctx.navigate('#/runs' + (qs ? '?' + qs : ''));
  };
  form.addEventListener('submit', (ev) => { ev.preventDefault(); apply(); });
  statusSel.addEventListener('change', apply);
  limitSel.addEventListener('change', apply);

  const tbody = h('tbody', {id: 'runs-body'});
  const table = h('table', {class: 'runs responsive'},
    h('caption', {class: 'visually-hidden'}, 'Runs, newest first'),
    h('thead', {}, h('tr', {}, ['Run', 'Workflow', 'Status', 'Started', 'Error'].map((c) => h('th', {scope: 'col'}, c)))),
    tbody);
  const msg = h('div', {id: 'runs-msg'});
  const updated = h('span', {id: 'runs-updated', class: 'muted'});
  const prev = h('button', {type: 'button', id: 'prev-page', disabled: true}, '← Newer');
  const next = h('button', {type: 'button', id: 'next-page', disabled: true}, 'Older →');
  const pageLabel = h('span', {class: 'muted', id: 'page-label'}, 'Page 1');
  prev.addEventListener('click', () => { if (page > 0) { page--; load(true); } });
  next.addEventListener('click', () => { if (cursors[page + 1]) { page++; load(true); } });

  replace(main,
    h('h1', {}, 'Runs'),
    form,
    h('p', {class: 'live-note'}, 'Statuses update by themselves every few seconds. ', updated),
    msg,
    h('div', {class: 'table-wrap', role: 'region', 'aria-label': 'Runs', tabindex: '0'}, table),
    h('nav', {class: 'pager', 'aria-label': 'Pages of runs'}, prev, pageLabel, next));

  // The filter takes a definition's name (a run's `workflow`): the names of the runs seen.
  const names = new Set();
  const addNames = (runs) => {
    const before = names.size;
    for (const r of runs) if (r.workflow) names.add(r.workflow);
    if (names.size !== before) replace(wfList, [...names].sort().map((n) => h('option', {value: n})));
  };

  function row(r) {
    const err = r.error ? `${r.error.code}: ${r.error.message}` : '';
    return h('tr', {dataset: {run: r.run_id, status: r.status}},
      h('td', {'data-label': 'Run'}, h('a', {href: '#/runs/' + encodeURIComponent(r.run_id)}, r.run_id)),
      h('td', {'data-label': 'Workflow'}, r.workflow || ''),
      h('td', {'data-label': 'Status', class: 'status'}, badge(r.status)),
      h('td', {'data-label': 'Started'}, fmtTime(r.started_at)),
      h('td', {'data-label': 'Error', class: 'error-cell'}, err));
  }

  async function load(moved) {
    clearTimeout(timer);
    if (ctrl) ctrl.abort();
    ctrl = new AbortController();
    try {
      const res = await api.runs({status, workflow, limit, cursor: cursors[page]}, {signal: ctrl.signal});
      if (stopped) return;
      const runs = res.runs || [];
      addNames(runs);
      const changes = [];
      for (const r of runs) {
        const before = known.get(r.run_id);
        if (before && before !== r.status) changes.push(`Run ${r.run_id} is now ${r.status.replace('_', ' ')}.`);
        known.set(r.run_id, r.status);
      }
      if (changes.length && !moved) ctx.announce(changes.join(' '));
      cursors = cursors.slice(0, page + 1);
      if (res.next_cursor) cursors[page + 1] = res.next_cursor;
      replace(tbody, runs.length ? runs.map(row) : h('tr', {}, h('td', {colspan: 5, class: 'empty'}, status || workflow ? 'No run matches these filters.' : 'No runs yet.')));
      prev.disabled = page === 0;
      next.disabled = !res.next_cursor;
      pageLabel.textContent = `Page ${page + 1}`;
      replace(msg);
      updated.textContent = `Updated ${new Date().toLocaleTimeString()}.`;
      if (moved) ctx.announce(`Page ${page + 1}: ${runs.length} runs.`);
    } catch (err) {
      if (stopped || err.name === 'AbortError') return;
      replace(msg, alert(`The runs could not be read: ${problemText(err)}`));
    }
    if (!stopped) timer = setTimeout(() => load(false), document.hidden ? POLL_MS * 4 : POLL_MS);
  }
  load(false);
  return () => { stopped = true; clearTimeout(timer); if (ctrl) ctrl.abort(); };
}
