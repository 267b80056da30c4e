// loss.js - the loss curve's data, read from the training log.
//
// The trainer writes a log line "step N/M: loss X" every 10 steps and at the
// last step (docs/trainer-protocol.md). The log may carry a prefix before it
// (a time stamp), so a line matches anywhere. Pure: text in, points out.

// Longest log the parser reads, in characters: the newest part is kept,
// since the curve's end is what people watch.
export const LOSS_MAX_TEXT = 4 * 1024 * 1024;

const LINE = /\bstep (\d+)\/(\d+): loss ([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)/;

// Returns { points: [{step, loss}] sorted by step, maxSteps } from a log's
// text. A step logged twice (a run resumed from a checkpoint repeats the
// steps after it) keeps its latest value. Lines with a loss that is not a
// finite number are left out.
export function parseLoss(text) {
  if (typeof text !== 'string') return { points: [], maxSteps: 0 };
  const src = text.length > LOSS_MAX_TEXT ? text.slice(text.length - LOSS_MAX_TEXT) : text;
  const byStep = new Map();
  let maxSteps = 0;
  for (const line of src.split('\n')) {
    const m = LINE.exec(line);
    if (!m) continue;
    const step = Number(m[1]);
    const total = Number(m[2]);
    const loss = Number(m[3]);
    if (!Number.isFinite(loss) || !Number.isSafeInteger(step)) continue;
    byStep.set(step, loss);
    if (Number.isSafeInteger(total) && total > maxSteps) maxSteps = total;
  }
  const points = [...byStep.entries()]
    .map(([step, loss]) => ({ step, loss }))
    .sort((a, b) => a.step - b.step);
  return { points, maxSteps };
}
