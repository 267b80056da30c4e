// samples.js - sample answers on the job page: the model's greedy answers
// to a few validation prompts at each epoch's end, beside the base model's
// (docs/api.md, "Sample answers"). They come as events of type "message"
// whose data has `sample: true`, `step`, `base`, `prompt` and `answer`.
// Pure: events in, rows out.

// The sequence number at the end of an event's id ("ftevent-…-42"), which
// orders events of the same second; null when the id has none.
function eventSeq(e) {
  const m = typeof e?.id === 'string' ? /-(\d+)$/.exec(e.id) : null;
  return m ? Number(m[1]) : null;
}

// Returns [{prompt, base, answers: [{step, answer}]}] in the order the
// prompts first appear (by time, then by the events' sequence), answers by
// step; a step answered twice (a resumed run repeats it) keeps the newest
// event's answer. `events` may come newest first, as the API lists them.
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
    if (!byPrompt.has(d.prompt)) byPrompt.set(d.prompt, { prompt: d.prompt, base: null, steps: new Map() });
    const p = byPrompt.get(d.prompt);
    if (d.base) p.base = d.answer;
    else if (Number.isSafeInteger(d.step)) p.steps.set(d.step, d.answer);
  }
  return [...byPrompt.values()].map((p) => ({
    prompt: p.prompt,
    base: p.base,
    answers: [...p.steps.entries()].sort((a, b) => a[0] - b[0]).map(([step, answer]) => ({ step, answer })),
  }));
}
