// The reins console: a single page over the HTTP API (docs/console.md). Routes live in the
// URL's fragment (#/runs, #/runs/ID, #/approvals, #/workflows, #/workflows/NAME), which never
// holds a token.

import {h, replace, alert, problemText} from './dom.js';
import {api, getToken, setToken, whenUnauthorized} from './api.js';
import {runsView} from './views/runs.js';
import {runView} from './views/run.js';
import {approvalsView} from './views/approvals.js';
import {workflowsView, workflowView} from './views/workflows.js';

const main = document.getElementById('main');
const who = document.getElementById('who');
const announcer = document.getElementById('announce');

// ctx is what every view gets.
const ctx = {
  me: null,
  // may reports whether the principal's roles allow an act: 'decide' (approve, deny, signal,
  // resume), 'submit' (start) or 'cancel' (submitters and approvers, each as itself). The
  // server checks again; this only hides buttons.
  may(act) {
    const roles = (this.me && this.me.roles) || [];
    if (roles.includes('admin')) return true;
    if (act === 'decide') return roles.includes('approver');
    if (act === 'submit') return roles.includes('submitter');
    if (act === 'cancel') return roles.includes('submitter') || roles.includes('approver');
    return roles.some((r) => r === 'viewer' || r === 'submitter' || r === 'approver');
  },
  // announce says text to screen readers (a polite live region).
  announce(text) {
    announcer.textContent = '';
    // A new text node in a later task makes readers announce a repeated message too.
    setTimeout(() => { announcer.textContent = text; }, 50);
  },
  navigate(hash) {
    if (location.hash === hash) route(); else location.hash = hash;
  },
};

let cleanup = null;
let notice = '';

function stopView() {
  if (cleanup) { try { cleanup(); } catch { /* the view is gone anyway */ } }
  cleanup = null;
}

function renderWho() {
  if (!ctx.me) { replace(who); return; }
  const roles = ctx.me.roles.length ? ctx.me.roles.join(', ') : 'no roles';
  replace(who,
    h('span', {id: 'principal', dataset: {name: ctx.me.name}}, 'Signed in as ', h('strong', {}, ctx.me.name), ` (${roles})`),
    ' ',
    h('button', {type: 'button', class: 'link', id: 'sign-out', onclick: signOut}, 'Sign out'));
}

function signOut() {
  setToken('');
  ctx.me = null;
  notice = 'Signed out. The token was removed from this tab.';
  renderWho();
  route();
}

// signInHelp is the page's text on which token to paste and where it is, with this console's
// address filled in.
function signInHelp() {
  const tpl = document.getElementById('sign-in-help');
  if (!tpl) return null;
  const help = tpl.content.cloneNode(true);
  const url = help.querySelector('.console-url');
  if (url) url.textContent = location.origin + '/';
  return help;
}

// tokenView asks for a token. It is kept in this tab's sessionStorage only.
function tokenView() {
  document.title = 'Sign in · reins';
  const input = h('input', {id: 'token', name: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false', required: true, 'aria-describedby': 'token-hint sign-in-help-text'});
  const status = h('div', {id: 'token-status'});
  const form = h('form', {id: 'token-form', class: 'card narrow', 'aria-labelledby': 'signin-h'},
    h('h1', {id: 'signin-h', tabindex: '-1'}, 'Sign in'),
    notice ? h('p', {class: 'notice', role: 'status'}, notice) : null,
    h('div', {class: 'field'},
      h('label', {for: 'token'}, 'API token'),
      input,
      h('small', {id: 'token-hint', class: 'hint'}, 'It is kept in this tab only (sessionStorage) and sent only in the Authorization header.')),
    h('button', {type: 'submit', class: 'primary'}, 'Sign in'),
    status,
    signInHelp());
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    setToken(token);
    replace(status, h('p', {role: 'status'}, 'Checking the token…'));
    try {
      ctx.me = await api.me({quiet401: true});
      notice = '';
      renderWho();
      ctx.announce(`Signed in as ${ctx.me.name}`);
      route();
    } catch (err) {
      setToken('');
      replace(status, alert(err.status === 401 ? 'This token is not the token of any principal of the server.' : problemText(err)));
      input.focus();
    }
  });
  replace(main, form);
  input.focus();
}

const routes = [
  [/^#\/runs\/?$/, (m, q) => runsView(main, ctx, q)],
  [/^#\/runs\/([^/?]+)$/, (m) => runView(main, ctx, decodeURIComponent(m[1]))],
  [/^#\/approvals\/?$/, () => approvalsView(main, ctx)],
  [/^#\/workflows\/?$/, () => workflowsView(main, ctx)],
  [/^#\/workflows\/([^/?]+)$/, (m, q) => workflowView(main, ctx, decodeURIComponent(m[1]), q)],
];

function markNav(hash) {
  for (const a of document.querySelectorAll('nav.main a')) {
    const section = a.getAttribute('href');
    if (hash === section || hash.startsWith(section + '/') || hash.startsWith(section + '?')) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

let lastPath = '';

async function route() {
  const focusedId = document.activeElement && main.contains(document.activeElement) ? document.activeElement.id : '';
  stopView();
  if (!getToken()) { markNav(''); tokenView(); return; }
  if (!ctx.me) {
    try {
      ctx.me = await api.me({quiet401: true});
      renderWho();
    } catch (err) {
      if (err.status === 401) { setToken(''); notice = 'The token of this tab is no longer valid: sign in again.'; tokenView(); return; }
      // An older server without /v1/me: every button shows and the server decides.
      ctx.me = {name: 'unknown', roles: ['admin'], unknown: true};
      renderWho();
    }
  }
  let hash = location.hash;
  if (!hash.startsWith('#/')) hash = '#/runs';
  const [path, query] = hash.split('?');
  const q = new URLSearchParams(query || '');
  markNav(path);
  for (const [re, view] of routes) {
    const m = path.match(re);
    if (m) {
      cleanup = view(m, q) || null;
      const again = path === lastPath;
      lastPath = path;
      // The same page with other filters keeps the focus where it was (a filter changed with
      // the keyboard); a new page moves it to its heading, so that a screen reader says where
      // it is.
      const keep = again && focusedId && document.getElementById(focusedId);
      if (keep) { keep.focus({preventScroll: true}); return; }
      const h1 = main.querySelector('h1');
      if (h1) { h1.setAttribute('tabindex', '-1'); h1.focus({preventScroll: true}); }
      window.scrollTo(0, 0);
      return;
    }
  }
  replace(main, h('h1', {tabindex: '-1'}, 'Not found'), h('p', {}, 'There is no page here. ', h('a', {href: '#/runs'}, 'See the runs.')));
}

whenUnauthorized(() => {
  setToken('');
  ctx.me = null;
  notice = 'The server did not accept the token: sign in again.';
  renderWho();
  stopView();
  tokenView();
});

window.addEventListener('hashchange', () => {
  if (!location.hash.startsWith('#/') && location.hash !== '') return; // in-page links (skip link)
  route();
});
document.getElementById('skip').addEventListener('click', (ev) => {
  ev.preventDefault();
  main.focus();
});
route();
