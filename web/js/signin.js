// signin.js - asks for the API key once, when the browser has none (or the
// server refused the one it had). The key is checked with one call before
// it is kept, so a typo is reported here and not as a failing Jobs tab.

import { api, clearKey, setKey } from './api.js';
import { el, setText, show } from './dom.js';

export function signinView(reason, onDone) {
  const ui = {};

  async function onSubmit(ev) {
    ev.preventDefault();
    show(ui.problem, false);
    if (!setKey(ui.key.value)) {
      setText(ui.problem, 'Enter the API key (at most 512 characters).');
      show(ui.problem, true);
      return;
    }
    ui.btn.disabled = true;
    try {
      await api('/v1/fine_tuning/jobs?limit=1');
      onDone();
    } catch (e) {
      clearKey();
      setText(ui.problem, e.status === 401 ? 'That API key was not accepted.' : `Could not sign in: ${e.message}`);
      show(ui.problem, true);
      ui.key.focus();
    } finally {
      ui.btn.disabled = false;
    }
  }

  return {
    title: 'Sign in',

    mount(main) {
      ui.key = el('input', { id: 'api-key', type: 'password', autocomplete: 'off', spellcheck: 'false', required: true, maxlength: '512' });
      ui.btn = el('button', { type: 'submit', class: 'primary' }, 'Sign in');
      ui.problem = el('p', { class: 'problem', role: 'alert', hidden: !reason }, reason || '');
      main.append(
        el('div', { class: 'head' }, el('h1', { tabindex: '-1' }, 'Sign in')),
        el('form', { class: 'signin card', onsubmit: onSubmit },
          el('p', {}, 'Enter your alallo API key. ', el('code', {}, 'alallo serve'),
            ' prints it, and the address it prints signs you in directly. The key is kept in this browser only.'),
          el('div', { class: 'field-row' }, el('label', { for: 'api-key' }, 'API key'), ui.key),
          ui.problem,
          el('div', { class: 'buttons' }, ui.btn)));
    },

    async refresh() {},

    unmount() {},
  };
}
