// Workflows: the registered ones and those of past runs (GET /v1/workflows, from_runs), and one
// workflow's graph, validation problems (validated again against the server's configuration of
// now) and source, where a submitter can start a run of it; a workflow known from its runs
// only shows them and its newest run's graph.

import {h, replace, fmtTime, alert, problemText, field} from '../dom.js';
import {api, enc} from '../api.js';
import {drawGraph} from '../graph.js';

export function workflowsView(main, ctx) {
  document.title = 'Workflows · reins';
  const body = h('tbody', {id: 'workflows-body'}, h('tr', {}, h('td', {colspan: 5}, 'Reading…')));
  const ranBody = h('tbody', {id: 'from-runs-body'});
  const ranSec = h('section', {id: 'from-runs', 'aria-labelledby': 'from-runs-h', hidden: true},
    h('h2', {id: 'from-runs-h'}, 'From past runs'),
    h('p', {}, 'Workflows of this server\'s runs that are not registered under their name (a file run with reins run FILE, for one): each is known from its runs, and its graph is that of its newest run.'),
    h('div', {class: 'table-wrap', role: 'region', 'aria-labelledby': 'from-runs-h', tabindex: '0'},
      h('table', {class: 'responsive'},
        h('thead', {}, h('tr', {}, ['Name', 'Known from', 'Runs', 'Newest run', 'Started'].map((c) => h('th', {scope: 'col'}, c)))),
        ranBody)));
  const regSec = h('section', {id: 'registered', 'aria-labelledby': 'registered-h'},
    h('h2', {id: 'registered-h'}, 'Registered'),
    h('div', {class: 'table-wrap', role: 'region', 'aria-labelledby': 'registered-h', tabindex: '0'},
      h('table', {class: 'responsive'},
        h('thead', {}, h('tr', {}, ['Name', 'Version', 'Hash', 'Registered', 'By'].map((c) => h('th', {scope: 'col'}, c)))),
        body)));
  const msg = h('div', {});
  const none = h('p', {id: 'no-workflows', class: 'empty', hidden: true},
    'No workflow is registered on this server and no run has been started yet. reins run FILE --server URL (or PUT /v1/workflows/NAME) registers a workflow; the workflow of any run started on this server is listed here too.');
  replace(main,
    h('h1', {}, 'Workflows'),
    h('p', {}, 'The workflows registered on this server (PUT /v1/workflows/NAME or reins run FILE --server URL), latest version each, and the workflows of its past runs.'),
    msg,
    none,
    regSec,
    ranSec);
  let stopped = false;
  api.workflows().then((res) => {
    if (stopped) return;
    const wfs = res.workflows || [];
    const names = new Set(wfs.map((w) => w.name));
    // A workflow registered (under its own name or another) is listed once, as registered.
    const ran = (res.from_runs || []).filter((r) => !names.has(r.name) && !(r.registered_as || []).length);
    none.hidden = wfs.length > 0 || ran.length > 0;
    regSec.hidden = !none.hidden;
    replace(body, wfs.length ? wfs.map((w) => h('tr', {dataset: {workflow: w.name}},
      h('td', {'data-label': 'Name'}, h('a', {href: '#/workflows/' + enc(w.name)}, w.name)),
      h('td', {'data-label': 'Version', class: 'num'}, String(w.version)),
      h('td', {'data-label': 'Hash'}, h('code', {title: w.hash}, String(w.hash || '').slice(0, 12))),
      h('td', {'data-label': 'Registered'}, fmtTime(w.registered_at)),
      h('td', {'data-label': 'By'}, w.registered_by || ''))) : h('tr', {}, h('td', {colspan: 5, class: 'empty'},
      ran.length ? `No workflow is registered; the ${ran.length === 1 ? 'workflow' : ran.length + ' workflows'} below ran without being registered.` : 'No workflow is registered.')));
    ranSec.hidden = ran.length === 0;
    replace(ranBody, ran.map((r) => h('tr', {dataset: {workflow: r.name, from: 'runs'}},
      h('td', {'data-label': 'Name'}, h('a', {href: '#/workflows/' + enc(r.name)}, r.name)),
      h('td', {'data-label': 'Known from'}, h('span', {class: 'badge st-none'}, 'from past runs')),
      h('td', {'data-label': 'Runs', class: 'num'}, h('a', {href: '#/runs?workflow=' + enc(r.name)}, String(r.runs))),
      h('td', {'data-label': 'Newest run'}, h('a', {href: '#/runs/' + enc(r.last_run_id)}, r.last_run_id)),
      h('td', {'data-label': 'Started'}, fmtTime(r.last_started_at)))));
  }).catch((err) => { if (!stopped) { replace(body); replace(msg, alert(problemText(err))); } });
  return () => { stopped = true; };
}

export function workflowView(main, ctx, name, q) {
  document.title = `Workflow ${name} · reins`;
  const version = q.get('version') || '';
  const content = h('div', {}, h('p', {}, 'Reading…'));
  replace(main,
    h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, h('a', {href: '#/workflows'}, 'Workflows'), ' / ', h('span', {'aria-current': 'page'}, name)),
    h('h1', {}, 'Workflow ', h('code', {}, name)),
    content);
  let stopped = false;
  api.workflow(name, version).then((wf) => {
    if (stopped) return;
    const problems = wf.problems || [];
    const versions = [];
    for (let v = wf.version; v >= 1 && versions.length < 20; v--) versions.push(v);
    const verSel = h('select', {id: 'wf-version'}, versions.map((v) => h('option', {value: v, selected: v === wf.version}, `version ${v}`)));
    verSel.addEventListener('change', () => ctx.navigate(`#/workflows/${enc(name)}?version=${verSel.value}`));
    replace(content,
      h('dl', {class: 'summary'},
        h('dt', {}, 'Version'), h('dd', {}, h('label', {for: 'wf-version', class: 'visually-hidden'}, 'Version'), verSel),
        h('dt', {}, 'Hash'), h('dd', {}, h('code', {}, wf.hash || '')),
        h('dt', {}, 'Registered'), h('dd', {}, fmtTime(wf.registered_at), wf.registered_by ? ` by ${wf.registered_by}` : ''),
        h('dt', {}, 'Runs'), h('dd', {}, h('a', {href: '#/runs?workflow=' + enc(definitionName(wf.source) || name)}, 'Runs of this workflow'))),
      h('section', {id: 'problems', 'aria-labelledby': 'problems-h'},
        h('h2', {id: 'problems-h'}, 'Validation'),
        problems.length
          ? [h('p', {class: 'error-text', role: 'alert'}, `${problems.length} problem${problems.length > 1 ? 's' : ''}: this workflow would not be accepted now.`),
            h('ul', {class: 'problems'}, problems.map((p) => h('li', {dataset: {code: p.code}},
              h('code', {}, p.code), p.line ? ` line ${p.line}` : '', p.key ? [' key ', h('code', {}, p.key)] : '', ': ', p.message)))]
          : h('p', {class: 'ok'}, 'No problems: the server\'s configuration of now accepts it.')),
      h('section', {'aria-labelledby': 'wgraph-h'}, h('h2', {id: 'wgraph-h'}, 'Graph'),
        wf.graph ? h('figure', {class: 'graph-box'}, drawGraph(wf.graph, {title: `Graph of workflow ${name}`})) : h('p', {class: 'muted'}, 'No graph.')),
      ctx.may('submit') ? startForm(ctx, name, wf.version) : null,
      h('section', {'aria-labelledby': 'src-h'}, h('h2', {id: 'src-h'}, 'Source'),
        h('pre', {class: 'source', tabindex: '0', 'aria-label': `Source of ${name}`}, wf.source || '')));
  }).catch(async (err) => {
    if (stopped) return;
    if (err.status !== 404) { replace(content, alert(problemText(err))); return; }
    try {
      const seen = await fromRuns(name);
      if (!stopped) replace(content, seen);
    } catch (err2) {
      if (!stopped) replace(content, alert(`No workflow ${name} is registered, and its runs could not be read: ${problemText(err2)}`));
    }
  });
  return () => { stopped = true; };
}

// fromRuns is the page of a workflow nobody registered under name: what its runs say of it (how
// many, the newest, its graph as the newest run drew it), or that nothing is known of it.
async function fromRuns(name) {
  const list = await api.workflows();
  const r = (list.from_runs || []).find((x) => x.name === name);
  if (!r) return h('p', {class: 'error-text', role: 'alert'}, `No workflow ${name} is registered, and no run of it is kept on this server.`);
  if ((r.registered_as || []).length) {
    return h('p', {id: 'registered-as'}, `No workflow is registered under the name ${name}; the workflow its runs ran is registered as `,
      r.registered_as.map((n, i) => [i ? ', ' : '', h('a', {href: '#/workflows/' + enc(n)}, n)]), '. ',
      h('a', {href: '#/runs?workflow=' + enc(name)}, `Its ${r.runs === 1 ? 'run' : r.runs + ' runs'}.`));
  }
  const run = await api.run(r.last_run_id, {trace_limit: '1'});
  return [
    h('p', {id: 'from-runs-note'}, h('span', {class: 'badge st-none'}, 'from past runs'), ' ',
      `${name} is not registered on this server: it is known from its ${r.runs === 1 ? 'run' : r.runs + ' runs'} (a file run with reins run FILE, for one). Register it to start runs of it here.`),
    h('dl', {class: 'summary'},
      h('dt', {}, 'Runs'), h('dd', {}, h('a', {href: '#/runs?workflow=' + enc(name)}, `${r.runs} run${r.runs === 1 ? '' : 's'} of this workflow`)),
      h('dt', {}, 'Newest run'), h('dd', {}, h('a', {href: '#/runs/' + enc(r.last_run_id)}, r.last_run_id), ', started ', fmtTime(r.last_started_at))),
    h('section', {'aria-labelledby': 'wgraph-h'}, h('h2', {id: 'wgraph-h'}, 'Graph'),
      h('p', {class: 'muted'}, `As its newest run, ${r.last_run_id}, ran it.`),
      run && run.graph ? h('figure', {class: 'graph-box'}, drawGraph(run.graph, {title: `Graph of workflow ${name}`})) : h('p', {class: 'muted'}, 'No graph.')),
  ];
}

// definitionName is the workflow's own name (its top-level `name = "..."`), which runs are
// listed by; the registered name may differ.
function definitionName(source) {
  for (const line of String(source || '').split('\n')) {
    if (/^\s*\[/.test(line)) return '';
    const m = line.match(/^\s*name\s*=\s*"([^"\\]*)"/);
    if (m) return m[1];
  }
  return '';
}

function startForm(ctx, name, version) {
  const input = h('textarea', {id: 'start-input', rows: 4, spellcheck: 'false'}, '{}');
  const out = h('div', {'aria-live': 'polite'});
  const form = h('form', {class: 'start card', 'aria-labelledby': 'start-h'},
    h('h2', {id: 'start-h'}, 'Start a run'),
    field('Input (JSON)', input, `Starts version ${version} of ${name}.`),
    h('button', {type: 'submit', class: 'primary'}, 'Start'),
    out);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    let value;
    try { value = JSON.parse(input.value || '{}'); } catch (err) { replace(out, alert(`The input is not JSON: ${err.message}`)); return; }
    try {
      const res = await api.start({workflow: name, version, input: value});
      ctx.navigate('#/runs/' + enc(res.run_id));
    } catch (err) { replace(out, alert(problemText(err))); }
  });
  return form;
}
