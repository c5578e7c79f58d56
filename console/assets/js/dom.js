// DOM helpers. Every text from the API goes into the page as a text node (textContent), never
// as HTML: h() makes text nodes of strings, and nothing here sets innerHTML.

const SVG_NS = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'text') el.textContent = String(v);
    else if (k === 'class') el.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
    else if (k === 'dataset') for (const [dk, dv] of Object.entries(v)) el.dataset[dk] = String(dv);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'value' && 'value' in el) el.value = v;
    else if (k === 'checked' || k === 'selected' || k === 'disabled') el[k] = Boolean(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

// h makes an HTML element: h('a', {href: '#/runs'}, 'Runs').
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

// s makes an SVG element.
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

// replace empties el and appends children.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// fmtTime is an ISO time as a <time> element in the reader's locale.
export function fmtTime(iso) {
  if (!iso) return h('span', {class: 'muted'}, '—');
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return h('span', {}, String(iso));
  return h('time', {datetime: iso, title: iso}, d.toLocaleString());
}

// fmtDuration is nanoseconds as a short duration.
export function fmtDuration(ns) {
  if (!ns) return '';
  const ms = ns / 1e6;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}

export function fmtCost(usd) {
  if (!usd) return '$0';
  return '$' + (usd < 0.01 ? usd.toFixed(4) : usd.toFixed(2));
}

export function fmtInt(n) {
  return (n || 0).toLocaleString();
}

// pretty is a JSON value, or JSON text, indented; text that is not JSON as it is.
export function pretty(v) {
  if (v === undefined) return '';
  if (typeof v === 'string') {
    try { return JSON.stringify(JSON.parse(v), null, 2); } catch { return v; }
  }
  return JSON.stringify(v, null, 2);
}

export const FINISHED = new Set(['completed', 'failed', 'cancelled', 'timed_out']);

// badge is a status as text in a coloured pill; the colour is never the only cue.
export function badge(status, extra) {
  return h('span', {class: ['badge', 'st-' + String(status || 'unknown').replace(/[^a-z_]/g, ''), extra]}, String(status || 'unknown').replace(/_/g, ' '));
}

// field is a labelled form control.
export function field(label, control, hint) {
  const id = control.id || ('f-' + Math.random().toString(36).slice(2));
  control.id = id;
  let hintEl = null;
  if (hint) {
    hintEl = h('small', {id: id + '-hint', class: 'hint'}, hint);
    control.setAttribute('aria-describedby', hintEl.id);
  }
  return h('div', {class: 'field'}, h('label', {for: id}, label), control, hintEl);
}

// problemText is one sentence of an API error.
export function problemText(err) {
  if (err && err.problem) {
    const p = err.problem;
    return `${p.status || ''} ${p.title || ''}: ${p.detail || ''}`.trim();
  }
  return String(err && err.message || err);
}

// alert is an error message that screen readers announce.
export function alert(text) {
  return h('p', {class: 'alert', role: 'alert'}, text);
}
