// loss.js - the loss curve's data, read from the training log.
//
// The trainer writes a log line "step N/M: loss X" every 10 steps and at the
// last step (docs/trainer-protocol.md). The log may carry a prefix before it
// (a time stamp), so a line matches anywhere. Pure: text in, points out.

// Longest log the parser reads, in characters: the newest part is kept,
// since the curve's end is what people watch.
export const LOSS_MAX_TEXT = 4 * 1024 * 1024;

const NUM = '([-+]?(?:\\d+\\.?\\d*|\\.\\d+)(?:[eE][-+]?\\d+)?)';
const LINE = new RegExp(`\\bstep (\\d+)\\/(\\d+): loss ${NUM}(?:, validation loss ${NUM})?`);
// The full validation loss, measured at each epoch's end (docs/trainer.md).
const FULL = new RegExp(`\\bstep (\\d+): full validation loss ${NUM}`);
// Reinforcement fine-tuning's step line: the mean reward of the step's
// answers and, every eval_interval, the validation reward (docs/rft.md).
const REWARD = new RegExp(`\\bstep (\\d+)\\/(\\d+): reward ${NUM} .*?(?:, validation reward ${NUM})?(?:;|$)`);

function sorted(map) {
  return [...map.entries()].map(([step, loss]) => ({ step, loss })).sort((a, b) => a.step - b.step);
}

// Returns { points: [{step, loss}] sorted by step, maxSteps, valid, full,
// epochs } from a log's text (for a reinforcement job's log, its rewards
// as points and valid, with kind: 'reward'): valid holds the validation loss on a batch
// (every 10 steps), full the whole validation set's at each epoch's end,
// epochs the steps where an epoch ended (those of full, but the last step). A step logged twice (a run resumed from a checkpoint repeats the
// steps after it) keeps its latest value. Lines with a loss that is not a
// finite number are left out.
export function parseLoss(text) {
  if (typeof text !== 'string') return { points: [], maxSteps: 0, valid: [], full: [], epochs: [] };
  const src = text.length > LOSS_MAX_TEXT ? text.slice(text.length - LOSS_MAX_TEXT) : text;
  const byStep = new Map();
  const valid = new Map();
  const full = new Map();
  let maxSteps = 0;
  const reward = new Map();
  const validReward = new Map();
  let rewardMax = 0;
  for (const line of src.split('\n')) {
    const r = REWARD.exec(line);
    if (r && Number.isFinite(Number(r[3])) && Number.isSafeInteger(Number(r[1]))) {
      reward.set(Number(r[1]), Number(r[3]));
      if (r[4] !== undefined && Number.isFinite(Number(r[4]))) validReward.set(Number(r[1]), Number(r[4]));
      rewardMax = Math.max(rewardMax, Number(r[2]));
      continue;
    }
    const f = FULL.exec(line);
    if (f && Number.isFinite(Number(f[2]))) full.set(Number(f[1]), Number(f[2]));
    const m = LINE.exec(line);
    if (!m) continue;
    if (m[4] !== undefined && Number.isFinite(Number(m[4]))) valid.set(Number(m[1]), Number(m[4]));
    const step = Number(m[1]);
    const total = Number(m[2]);
    const loss = Number(m[3]);
    if (!Number.isFinite(loss) || !Number.isSafeInteger(step)) continue;
    byStep.set(step, loss);
    if (Number.isSafeInteger(total) && total > maxSteps) maxSteps = total;
  }
  // a reinforcement job's log has rewards, not losses: its curve is the reward's
  if (byStep.size === 0 && reward.size > 0) {
    return { points: sorted(reward), maxSteps: rewardMax, valid: sorted(validReward), full: [],
      epochs: [], kind: 'reward' };
  }
  const points = sorted(byStep);
  const fullPoints = sorted(full);
  const epochs = fullPoints.map((p) => p.step).filter((s) => !(maxSteps && s >= maxSteps));
  return { points, maxSteps, valid: sorted(valid), full: fullPoints, epochs };
}
