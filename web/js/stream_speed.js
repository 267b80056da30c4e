// stream_speed.js - how fast a streamed answer came, as the browser saw it:
// time to first token (from sending the request to the first chunk that
// carries text) and tokens per second after it (the tokens after the first
// over the time from the first text to the last, as serving benchmarks
// count decode speed; an answer of one token has none). The token count is
// the server's (usage.completion_tokens of the stream's last chunk).
// Pure: the times are given (performance.now() milliseconds).

// { ttftMs, tokens, tokensPerSecond, together } from the times the request
// was sent, the first and the last text arrived, and the answer's token
// count; tokensPerSecond is null when it cannot be measured (fewer than 2
// tokens, or no time between the first and last text). together is true
// when an answer of 2 tokens or more arrived in one read: a short answer of
// a small model can be made faster than the browser's reads, and then it
// has no speed the browser could see, which the line says.
export function answerSpeed({ sentAt, firstAt, lastAt, tokens }) {
  const n = Number.isInteger(tokens) && tokens >= 0 ? tokens : null;
  const ttftMs = Number.isFinite(firstAt) && Number.isFinite(sentAt) ? Math.max(0, firstAt - sentAt) : null;
  const span = Number.isFinite(lastAt) && Number.isFinite(firstAt) ? lastAt - firstAt : 0;
  const tokensPerSecond = n !== null && n >= 2 && span > 0 ? (n - 1) / (span / 1000) : null;
  const together = n !== null && n >= 2 && Number.isFinite(firstAt) && span <= 0;
  return { ttftMs, tokens: n, tokensPerSecond, together };
}

// The line shown under an answer, e.g. "First token after 123 ms · 16 tokens
// at 45.6 tokens/s", or "... · 8 tokens, all at once" for an answer that
// arrived in one read.
export function speedText({ ttftMs, tokens, tokensPerSecond, together = false }) {
  const parts = [];
  if (ttftMs !== null) parts.push(`First token after ${Math.round(ttftMs)} ms`);
  if (tokens !== null) {
    const count = `${tokens} ${tokens === 1 ? 'token' : 'tokens'}`;
    if (tokensPerSecond !== null) parts.push(`${count} at ${tokensPerSecond.toFixed(1)} tokens/s`);
    else parts.push(together ? `${count}, all at once` : count);
  }
  return parts.join(' · ');
}

// Splits server-sent event text into the data of its whole events (the
// text after "data: ") and the rest, an event not yet complete.
export function sseEvents(text) {
  const blocks = text.split('\n\n');
  const rest = blocks.pop();
  const data = [];
  for (const b of blocks) {
    const lines = b.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, ''));
    if (lines.length) data.push(lines.join('\n'));
  }
  return { data, rest };
}
