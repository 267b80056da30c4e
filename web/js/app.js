// app.js - the dashboard's entry point: sign-in, routes, polling.
//
// Routes (the part of the address after "#"):
//   #/jobs          the Jobs tab (also the default)
//   #/jobs/{id}     a job's page
//   #/new           the New job form
// One view is mounted at a time in <main>. The current view's refresh() runs
// every POLL_MS while the tab is visible, never twice at once, so a slow
// server delays the next poll instead of piling requests up.

import { clearKey, getKey, setUnauthorizedHandler, takeKeyFromHash } from './api.js';
import { jobView } from './job_view.js';
import { jobsView } from './jobs_view.js';
import { newJobView } from './new_job_view.js';
import { signinView } from './signin.js';

const POLL_MS = 3000;
const ID_MAX = 200;

let view = null;
let timer = null;
let generation = 0; // bumps on every mount; stale polls see it changed

function route() {
  const h = location.hash || '#/jobs';
  const m = /^#\/jobs\/([^/?#]+)$/.exec(h);
  if (m) {
    let id = '';
    try {
      id = decodeURIComponent(m[1]);
    } catch {
      id = '';
    }
    if (id && id.length <= ID_MAX) return { nav: 'jobs', make: () => jobView(id) };
  }
  if (h === '#/new') return { nav: 'new', make: newJobView };
  return { nav: 'jobs', make: jobsView };
}

function markNav(nav) {
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (a.dataset.nav === nav) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

let pollingGen = -1; // the generation whose refresh is in flight

async function poll(gen) {
  if (gen !== generation || pollingGen === gen) return;
  clearTimeout(timer);
  pollingGen = gen;
  try {
    if (!document.hidden && view) await view.refresh();
  } catch (e) {
    // A view reports its own problems on the page; this is a last guard so
    // that polling never stops on an unexpected error.
    console.warn('refresh:', e);
  } finally {
    if (pollingGen === gen) pollingGen = -1;
  }
  if (gen === generation) timer = setTimeout(() => poll(gen), POLL_MS);
}

function mount(v, nav) {
  if (view) view.unmount();
  clearTimeout(timer);
  generation++;
  const main = document.getElementById('main');
  main.replaceChildren();
  view = v;
  markNav(nav);
  document.title = v.title === 'Jobs' ? 'alallo' : `${v.title} · alallo`;
  v.mount(main);
  const h1 = main.querySelector('h1');
  // Move focus to the new heading after a navigation, as a page load would;
  // not on first load, so the browser's own start position is kept.
  if (h1 && document.body.dataset.started) h1.focus({ preventScroll: false });
  document.body.dataset.started = '1';
  poll(generation);
}

function showSignin(reason) {
  document.getElementById('signout').hidden = true;
  mount(signinView(reason, () => start()), null);
}

function start() {
  if (!getKey()) {
    showSignin('');
    return;
  }
  document.getElementById('signout').hidden = false;
  const r = route();
  mount(r.make(), r.nav);
}

setUnauthorizedHandler(() => {
  if (view && view.title === 'Sign in') return;
  clearKey();
  showSignin('The server did not accept the saved API key. Enter it again.');
});

window.addEventListener('hashchange', () => {
  if (takeKeyFromHash() || getKey()) start();
});
document.addEventListener('visibilitychange', () => {
  // Come back up to date at once when the tab is shown again.
  if (!document.hidden && view) poll(generation);
});
document.getElementById('signout').addEventListener('click', () => {
  clearKey();
  showSignin('');
});

takeKeyFromHash();
start();
