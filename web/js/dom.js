// dom.js - small helpers to build and update elements.
//
// Text always goes in through textContent, never as HTML, so nothing a job
// name or a log line contains can become markup. Updates write only what
// changed, which keeps polling from flickering or moving the caret.

// el('a', { href: '#/jobs', class: 'x' }, 'text', child, ...): attributes
// whose value is null, undefined or false are left out; `true` sets an empty
// attribute; functions under on* keys become event listeners.
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// Sets the text of `node` only when it differs.
export function setText(node, text) {
  const t = String(text ?? '');
  if (node.textContent !== t) node.textContent = t;
}

// Sets (or, for null, removes) an attribute only when it differs.
export function setAttr(node, name, value) {
  if (value === null || value === undefined) {
    if (node.hasAttribute(name)) node.removeAttribute(name);
    return;
  }
  const v = String(value);
  if (node.getAttribute(name) !== v) node.setAttribute(name, v);
}

// Shows or hides a node with the `hidden` attribute.
export function show(node, visible) {
  if (node.hidden === !!visible) node.hidden = !visible;
}

// A progress bar: the element that carries the hover text (`title`), the
// fill, and the percentage text. updateProgress() changes it in place.
export function progressBar() {
  const fill = el('span', { class: 'fill' });
  const track = el('span', { class: 'track' }, fill);
  const pct = el('span', { class: 'pct' });
  const bar = el('span', {
    class: 'progress',
    role: 'progressbar',
    'aria-valuemin': '0',
    'aria-valuemax': '100',
  }, track, pct);
  return bar;
}

export function updateProgress(bar, percent, title) {
  const pctText = `${percent}%`;
  setAttr(bar, 'aria-valuenow', percent);
  setAttr(bar, 'aria-valuetext', `${pctText}, ${title}`);
  setAttr(bar, 'title', title);
  setText(bar.querySelector('.pct'), pctText);
  const fill = bar.querySelector('.fill');
  const w = `${percent}%`;
  if (fill.style.width !== w) fill.style.width = w;
}

// A status badge: the status name in words, coloured by a class.
export function updateBadge(badge, status) {
  setText(badge, status || '');
  const cls = `badge s-${String(status || 'unknown').replace(/[^a-z-]/g, '')}`;
  if (badge.className !== cls) badge.className = cls;
}
