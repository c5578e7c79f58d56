// Registered workflows: the list, and one workflow's graph, validation problems (validated again
// against the server's configuration of now) and source; a submitter can start a run of it.

import {h, replace, fmtTime, alert, problemText, field} from '../dom.js';
import {api, enc} from '../api.js';
import {drawGraph} from '../graph.js';

export function workflowsView(main, ctx) {
  document.title = 'Workflows · reins';
  const body = h('tbody', {id: 'workflows-body'}, h('tr', {}, h('td', {colspan: 5}, 'Reading…')));
  const msg = h('div', {});
  replace(main,
    h('h1', {}, 'Workflows'),
    h('p', {}, 'The workflows registered on this server (PUT /v1/workflows/NAME or reins run FILE --server URL), latest version each.'),
    msg,
    h('div', {class: 'table-wrap', role: 'region', 'aria-label': 'Workflows', tabindex: '0'},
      h('table', {class: 'responsive'},
        h('thead', {}, h('tr', {}, ['Name', 'Version', 'Hash', 'Registered', 'By'].map((c) => h('th', {scope: 'col'}, c)))),
        body)));
  let stopped = false;
  api.workflows().then((res) => {
    if (stopped) return;
    const wfs = res.workflows || [];
    replace(body, wfs.length ? wfs.map((w) => h('tr', {dataset: {workflow: w.name}},
      h('td', {'data-label': 'Name'}, h('a', {href: '#/workflows/' + enc(w.name)}, w.name)),
      h('td', {'data-label': 'Version', class: 'num'}, String(w.version)),
      h('td', {'data-label': 'Hash'}, h('code', {title: w.hash}, String(w.hash || '').slice(0, 12))),
      h('td', {'data-label': 'Registered'}, fmtTime(w.registered_at)),
      h('td', {'data-label': 'By'}, w.registered_by || ''))) : h('tr', {}, h('td', {colspan: 5, class: 'empty'}, 'No workflow is registered.')));
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
  }).catch((err) => {
    if (!stopped) replace(content, alert(err.status === 404 ? `No workflow ${name} is registered.` : problemText(err)));
  });
  return () => { stopped = true; };
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
