// Server-Sent Events read with fetch: a browser's EventSource cannot send the Authorization
// header. The stream is parsed as the HTML standard says (event, data, id, retry; comments
// ignored) and resumed after a break with Last-Event-ID, so no durable event is missed or seen
// twice.

import {headers, readProblem, ApiError} from './api.js';

const PERMANENT = new Set([400, 401, 403, 404, 405, 410, 501]);

// openStream reads path until its `end` message, close() or a permanent error. handlers:
// message(type, data, id), state('connecting' | 'live' | 'reconnecting' | 'ended' | 'closed'),
// error(ApiError) for an answer that retrying cannot change.
export function openStream(path, handlers) {
  const ctrl = new AbortController();
  let lastId = null;
  let retry = 1000;
  let closed = false;
  let ended = false;
  const state = (s) => handlers.state && handlers.state(s);

  function dispatch(ev) {
    if (ev.id !== null) lastId = ev.id;
    if (!ev.data.length && ev.type === 'message') return;
    let data = ev.data.join('\n');
    try { data = JSON.parse(data); } catch { /* a message that is not JSON stays text */ }
    if (ev.type === 'end') ended = true;
    handlers.message(ev.type, data, lastId);
  }

  async function readOnce() {
    const hs = headers({Accept: 'text/event-stream'});
    if (lastId !== null) hs['Last-Event-ID'] = lastId;
    const resp = await fetch(path, {headers: hs, credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer', signal: ctrl.signal});
    if (!resp.ok) {
      const err = new ApiError(resp.status, await readProblem(resp));
      err.permanent = PERMANENT.has(resp.status);
      throw err;
    }
    state('live');
    retry = 1000;
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let ev = {type: 'message', data: [], id: null};
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return;
      buf += value;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        let line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          dispatch(ev);
          ev = {type: 'message', data: [], id: null};
          if (ended) { reader.cancel().catch(() => {}); return; }
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const name = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? '' : line.slice(colon + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        if (name === 'event') ev.type = val;
        else if (name === 'data') ev.data.push(val);
        else if (name === 'id' && !val.includes('\0')) ev.id = val;
        else if (name === 'retry' && /^\d+$/.test(val)) retry = Number(val);
      }
    }
  }

  (async () => {
    state('connecting');
    while (!closed && !ended) {
      try {
        await readOnce();
      } catch (err) {
        if (closed) return;
        if (err instanceof ApiError && err.permanent) {
          state('closed');
          handlers.error && handlers.error(err);
          return;
        }
      }
      if (closed || ended) break;
      state('reconnecting');
      // The wait between two connections backs off; it is not a synchronisation.
      await new Promise((r) => setTimeout(r, retry));
      retry = Math.min(retry * 2, 15000);
    }
    state(ended ? 'ended' : 'closed');
  })();

  return {
    close() { closed = true; ctrl.abort(); },
    get lastEventId() { return lastId; },
  };
}
