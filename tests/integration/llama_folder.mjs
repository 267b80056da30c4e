// llama_folder.mjs - pieces for tests that write their own Hugging Face
// Llama folder: deterministic normal samples and an F32 safetensors writer.

import fs from 'node:fs';

// Deterministic normal samples (xorshift + Box-Muller).
export function rng(seed) {
  let s = seed >>> 0 || 1;
  const u = () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return (s + 0.5) / 4294967296;
  };
  return () => Math.sqrt(-2 * Math.log(u())) * Math.cos(2 * Math.PI * u());
}

// tensors: [[name, shape, Float32Array], ...] -> one F32 safetensors file.
export function writeSafetensors(file, tensors) {
  const header = {};
  let off = 0;
  for (const [name, shape, data] of tensors) {
    header[name] = { dtype: 'F32', shape, data_offsets: [off, off + data.byteLength] };
    off += data.byteLength;
  }
  let h = JSON.stringify(header);
  while ((8 + h.length) % 8) h += ' ';
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  fs.writeFileSync(file, Buffer.concat([len, Buffer.from(h), ...tensors.map((t) => Buffer.from(t[2].buffer))]));
}
