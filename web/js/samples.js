// samples.js - sample answers on the job page: the model's greedy answers
// to a few validation prompts at each epoch's end, beside the base model's
// (docs/api.md, "Sample answers"). They come as events of type "message"
// whose data has `sample: true`, `step`, `base`, `prompt` and `answer`;
// a reinforcement job's also have the grader's `score` and, for a multi
// grader, each sub-grader's in `scores` (docs/rft.md). Pure: events in,
// rows out.

// The sequence number at the end of an event's id ("ftevent-…-42"), which
// orders events of the same second; null when the id has none.
function eventSeq(e) {
  const m = typeof e?.id === 'string' ? /-(\d+)$/.exec(e.id) : null;
  return m ? Number(m[1]) : null;
}

// The grade of a sample's data: {score} and, when the grader was a multi,
// {scores: {name: score}}; null for an answer no grader scored.
function gradeOf(d) {
  if (typeof d.score !== 'number' || !Number.isFinite(d.score)) return null;
  const g = { score: d.score };
  if (d.scores && typeof d.scores === 'object') {
    const subs = Object.entries(d.scores).filter(([, v]) => typeof v === 'number' && Number.isFinite(v));
    if (subs.length) g.scores = Object.fromEntries(subs);
  }
  return g;
}

// A grade as the samples table shows it: "0.75", or with a multi grader's
// sub-graders "0.75 (close 0.5, exact 1)"; "" for none. Three significant
// digits at most.
export function gradeText(g) {
  if (!g || typeof g.score !== 'number') return '';
  const n = (x) => String(Number(x.toPrecision(3)));
  const subs = g.scores ? Object.entries(g.scores).map(([k, v]) => `${k} ${n(v)}`) : [];
  return subs.length ? `${n(g.score)} (${subs.join(', ')})` : n(g.score);
}

// Returns [{prompt, base, baseGrade, answers: [{step, answer, grade?}]}] in
// the order the prompts first appear (by time, then by the events'
// sequence), answers by step; a step answered twice (a resumed run repeats
// it) keeps the newest event's answer. `grade` (and baseGrade, else null)
// is the grader's ({score, scores?}), only on a graded answer. `events` may
// come newest first, as the API lists them.
export function groupSamples(events) {
  const byPrompt = new Map();
  const list = Array.isArray(events) ? [...events] : [];
  list.sort((a, b) => {
    const dt = (a?.created_at ?? 0) - (b?.created_at ?? 0);
    const sa = eventSeq(a), sb = eventSeq(b);
    return dt !== 0 || sa === null || sb === null ? dt : sa - sb;
  });
  for (const e of list) {
    const d = e?.data;
    if (!d || d.sample !== true || typeof d.prompt !== 'string' || typeof d.answer !== 'string') continue;
    if (!byPrompt.has(d.prompt)) byPrompt.set(d.prompt, { prompt: d.prompt, base: null, baseGrade: null, steps: new Map() });
    const p = byPrompt.get(d.prompt);
    const grade = gradeOf(d);
    if (d.base) {
      p.base = d.answer;
      p.baseGrade = grade;
    } else if (Number.isSafeInteger(d.step)) {
      p.steps.set(d.step, grade ? { answer: d.answer, grade } : { answer: d.answer });
    }
  }
  return [...byPrompt.values()].map((p) => ({
    prompt: p.prompt,
    base: p.base,
    baseGrade: p.baseGrade,
    answers: [...p.steps.entries()].sort((a, b) => a[0] - b[0]).map(([step, a]) => ({ step, ...a })),
  }));
}
