// api.js - the dashboard's only way to the server: the API key and fetch.
//
// The key lives in localStorage under "alallo.apiKey" (SPEC §1). `alallo
// serve` prints a URL ending in "#key=<API key>"; takeKeyFromHash() stores
// that key and removes it from the address bar and the history entry.
// Every call goes to this page's own origin (same-origin paths only), with
// "Authorization: Bearer <key>". Errors from the API ({"error":{code,
// message,param}}) become ApiError with the server's one-line message.

import { sseEvents } from './stream_speed.js';

export const KEY_NAME = 'alallo.apiKey';

// Longest API key accepted from the address bar or the sign-in form.
const KEY_MAX = 512;
// Jobs listed per page and pages read per refresh: the Jobs tab shows at
// most PAGE_LIMIT * PAGE_MAX jobs (newest first) and says so when it stops.
export const PAGE_LIMIT = 100;
export const PAGE_MAX = 20;
// Longest wait for one answer before it counts as failed; opts.timeoutMs
// overrides it for calls known to be slow (a model export).
const TIMEOUT_MS = 30000;

export class ApiError extends Error {
  constructor(status, message, code = null, param = null) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.param = param;
  }
}

let onUnauthorized = () => {};

// Registers what to do when the server refuses the key (401).
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

export function getKey() {
  try {
    return localStorage.getItem(KEY_NAME) || '';
  } catch {
    return '';
  }
}

// Stores a key; returns false when it is empty or too long.
export function setKey(key) {
  const k = String(key || '').trim();
  if (!k || k.length > KEY_MAX) return false;
  localStorage.setItem(KEY_NAME, k);
  return true;
}

export function clearKey() {
  localStorage.removeItem(KEY_NAME);
}

// When the address ends in "#key=...", stores the key, replaces the address
// with "#/jobs" (so the key is not left in the bar, the history or a
// bookmark), and returns true.
export function takeKeyFromHash() {
  const m = /^#key=([^&]*)/.exec(location.hash);
  if (!m) return false;
  let key = '';
  try {
    key = decodeURIComponent(m[1]);
  } catch {
    key = '';
  }
  history.replaceState(null, '', `${location.pathname}${location.search}#/jobs`);
  return setKey(key);
}

async function errorFrom(res) {
  let message = `The server answered ${res.status} ${res.statusText}`.trim();
  let code = null;
  let param = null;
  try {
    const body = await res.json();
    if (body && body.error && typeof body.error.message === 'string') {
      message = body.error.message;
      code = body.error.code ?? null;
      param = body.error.param ?? null;
    }
  } catch {
    // Not JSON: keep the status line.
  }
  return new ApiError(res.status, message, code, param);
}

// Sends a request and waits for its answer's status; rejects with ApiError
// (the server's message, or a network reason) unless it is a success.
// Resolves to { res, done }: call done() once the body is read.
async function send(path, opts) {
  if (!path.startsWith('/')) throw new ApiError(0, 'internal: relative API path');
  const headers = { Authorization: `Bearer ${getKey()}` };
  let body;
  if (opts.json !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(opts.json);
  } else if (opts.form) {
    body = opts.form;
  }
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), opts.timeoutMs || TIMEOUT_MS);
  const done = () => clearTimeout(timer);
  let res;
  try {
    res = await fetch(path, {
      method: opts.method || (body ? 'POST' : 'GET'),
      headers,
      body,
      signal: ctl.signal,
      cache: 'no-store',
      credentials: 'omit',
    });
  } catch (e) {
    done();
    const why = e && e.name === 'AbortError' ? 'the server took too long to answer' : 'the server cannot be reached';
    throw new ApiError(0, `No answer: ${why}.`);
  }
  try {
    if (res.status === 401) {
      const err = await errorFrom(res);
      onUnauthorized(err);
      throw err;
    }
    if (!res.ok) throw await errorFrom(res);
  } catch (e) {
    done();
    throw e;
  }
  return { res, done };
}

// Calls the API. `path` starts with "/v1/". opts: { method, json, form,
// as: 'json' | 'text' | 'blob' }. Resolves to the parsed answer; rejects
// with ApiError (the server's message, or a network reason). opts.timeoutMs
// replaces the default wait.
export async function api(path, opts = {}) {
  const { res, done } = await send(path, opts);
  try {
    if (opts.as === 'text') return await res.text();
    if (opts.as === 'blob') return await res.blob();
    if (res.status === 204) return null;
    return await res.json();
  } finally {
    done();
  }
}

// Calls an API that answers with server-sent events (`stream: true`): each
// event's JSON goes to onEvent(object) as it arrives, until `data: [DONE]`.
// Rejects as api() does, and with ApiError when the stream ends before
// [DONE] (the generation failed midway) or an event is not JSON.
// opts.timeoutMs bounds the whole stream.
export async function apiStream(path, opts, onEvent) {
  const { res, done } = await send(path, opts);
  const cut = () => new ApiError(0, 'The answer stopped before its end.');
  try {
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let text = '';
    for (;;) {
      let part;
      try {
        part = await reader.read();
      } catch {
        throw cut();
      }
      if (part.done) throw cut();
      text += decoder.decode(part.value, { stream: true });
      const { data, rest } = sseEvents(text);
      text = rest;
      for (const d of data) {
        if (d === '[DONE]') {
          reader.cancel().catch(() => {});
          return;
        }
        let event;
        try {
          event = JSON.parse(d);
        } catch {
          throw new ApiError(0, 'The server sent an event that is not JSON.');
        }
        onEvent(event);
      }
    }
  } finally {
    done();
  }
}

// Every job of the account, newest first, following the cursor
// (`after`, `has_more`). Returns { jobs, truncated }.
export async function listAllJobs() {
  const jobs = [];
  let after = null;
  for (let page = 0; page < PAGE_MAX; page++) {
    const q = new URLSearchParams({ limit: String(PAGE_LIMIT) });
    if (after) q.set('after', after);
    const res = await api(`/v1/fine_tuning/jobs?${q}`);
    const data = Array.isArray(res?.data) ? res.data : [];
    jobs.push(...data);
    if (!res?.has_more || data.length === 0) return { jobs, truncated: false };
    after = res.last_id || data[data.length - 1].id;
  }
  return { jobs, truncated: true };
}

// Saves `blob` as a file named `filename`. Downloads go through api() with
// as: 'blob' first, since a plain link cannot carry the Authorization header.
export function saveBlob(blob, filename) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

// An id as it may appear in a path: the server's ids are [A-Za-z0-9:_.-].
export function pathId(id) {
  return encodeURIComponent(String(id));
}
