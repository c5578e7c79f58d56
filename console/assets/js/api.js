// The HTTP API (docs/api.md), same origin only. The token goes in the Authorization header and
// nowhere else: never in a URL, never in a cookie (credentials: 'omit').

const TOKEN_KEY = 'reins.token';

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// ApiError is an answer that is not 2xx, with its RFC 9457 problem document.
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

let onUnauthorized = () => {};

// whenUnauthorized sets what a 401 does (the console asks for a token again).
export function whenUnauthorized(fn) {
  onUnauthorized = fn;
}

export function headers(extra) {
  const hs = {Accept: 'application/json', ...extra};
  const token = getToken();
  if (token) hs.Authorization = 'Bearer ' + token;
  return hs;
}

export async function readProblem(resp) {
  try {
    const p = await resp.json();
    if (p && typeof p === 'object') return {status: resp.status, title: resp.statusText, ...p};
  } catch { /* not a problem document */ }
  return {status: resp.status, title: resp.statusText || `HTTP ${resp.status}`, detail: ''};
}

// request calls the API and returns the JSON answer, or throws an ApiError.
export async function request(method, path, body, opts = {}) {
  return (await exchange(method, path, body, opts)).data;
}

// exchange is request with the answer's status: {status, data}.
export async function exchange(method, path, body, opts = {}) {
  const init = {method, headers: headers(), credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer', signal: opts.signal};
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  if (!resp.ok) {
    const problem = await readProblem(resp);
    if (resp.status === 401 && !opts.quiet401) onUnauthorized(problem);
    throw new ApiError(resp.status, problem);
  }
  const text = await resp.text();
  return {status: resp.status, data: text ? JSON.parse(text) : null};
}

export const enc = encodeURIComponent;

export const api = {
  me: (opts) => request('GET', '/v1/me', undefined, opts),
  runs(params, opts) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) if (v) q.set(k, v);
    const qs = q.toString();
    return request('GET', '/v1/runs' + (qs ? '?' + qs : ''), undefined, opts);
  },
  // run reads a run and a page of its trace: params trace_limit, trace_cursor (docs/api.md).
  run(id, params, opts) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) if (v) q.set(k, v);
    const qs = q.toString();
    return request('GET', `/v1/runs/${enc(id)}` + (qs ? '?' + qs : ''), undefined, opts);
  },
  iteration: (id, step, n, full, opts) => request('GET', `/v1/runs/${enc(id)}/iterations/${enc(step)}/${n}${full ? '?full=true' : ''}`, undefined, opts),
  cancel: (id, reason) => request('POST', `/v1/runs/${enc(id)}/cancel`, reason ? {reason} : {}),
  // decide answers {status, data}: 200 once the engine took the decision, 202 when it was
  // sent but not taken yet.
  decide: (id, call, decision, message) => exchange('POST', `/v1/runs/${enc(id)}/approvals/${enc(call)}`, {decision, message}),
  signal: (id, event, data) => request('POST', `/v1/runs/${enc(id)}/signals/${enc(event)}`, {data}),
  resume: (id, input, step) => request('POST', `/v1/runs/${enc(id)}/resume`, step ? {input, step} : {input}),
  start: (body) => request('POST', '/v1/runs', body),
  workflows: (opts) => request('GET', '/v1/workflows', undefined, opts),
  workflow: (name, version, opts) => request('GET', `/v1/workflows/${enc(name)}${version ? '?version=' + enc(version) : ''}`, undefined, opts),
};
