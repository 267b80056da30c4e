// cancel.js - the sentence beside the Cancel button: what cancelling now
// costs, by the money rules of SPEC §2.
//
//   queued                       nothing is charged
//   running / re-scheduling      the steps completed so far are charged
//   ... past the upper end of
//       the estimated time       free
//
// Pure: a job object and the current time in, { free, text } out.
// The server is the authority on money. When the job object carries
// price.cancel_now (the amount a cancel would charge now, alallo extension)
// that figure is stated; otherwise the dashboard states the share of the
// estimated price that the completed steps represent, as a range, and says
// it is approximate.

import { formatMoney, formatMoneyRange, num } from './format.js';

// Seconds the job has existed: the estimate's time range counts from
// creation (it includes the wait for capacity), so the "past the upper end"
// rule is measured from created_at too.
function ageSeconds(job, nowSeconds) {
  const created = num(job.created_at);
  return created === null ? null : Math.max(0, nowSeconds - created);
}

function stepsPhrase(n) {
  return n === 1 ? 'the 1 step completed so far' : `the ${n} steps completed so far`;
}

// Returns { free: bool, text: string } for a job whose Cancel button is
// shown (queued, running, re-scheduling), or null for any other status.
export function cancelCost(job, nowSeconds) {
  const status = job.status;
  if (status === 'queued') {
    return { free: true, text: 'Cancelling now costs nothing: the job has not started training.' };
  }
  if (status !== 'running' && status !== 're-scheduling') return null;

  const high = num(job.estimate?.time?.high_s);
  const age = ageSeconds(job, nowSeconds);
  if (high !== null && age !== null && age > high) {
    return {
      free: true,
      text: 'Cancelling now is free: the job has run past the upper end of its estimated time.',
    };
  }

  const price = job.price || {};
  const currency = price.currency || job.estimate?.price?.currency || 'USD';
  const done = num(job.progress?.steps_done) ?? 0;
  if (done <= 0) {
    return { free: true, text: 'Cancelling now costs nothing: no training step has completed yet.' };
  }
  const exact = num(price.cancel_now);
  if (exact !== null) {
    return {
      free: exact === 0,
      text: `Cancelling now costs ${formatMoney(exact, currency)}, the price of ${stepsPhrase(done)}.`,
    };
  }
  const max = num(job.progress?.max_steps);
  const est = job.estimate?.price;
  if (max && est && (num(est.low) !== null || num(est.high) !== null)) {
    const share = Math.min(1, done / max);
    const low = num(est.low) === null ? null : est.low * share;
    const highP = num(est.high) === null ? null : est.high * share;
    return {
      free: false,
      text: `Cancelling now costs about ${formatMoneyRange(low, highP, est.currency || currency)}, the price of ${stepsPhrase(done)}.`,
    };
  }
  return { free: false, text: `Cancelling now charges the price of ${stepsPhrase(done)}.` };
}
