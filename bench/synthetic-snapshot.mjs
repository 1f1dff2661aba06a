// Synthetic, schema-valid snapshots of any size for the panel benchmark and the large-snapshot
// tests: a 32-layer transformer (embedding, blocks of attention + MLP + norms, output layer),
// N tensors alive at the peak spread over its modules, categories and phases, a 2,000-point
// timeline and an allocation stream. Deterministic (seeded). The numbers are made up but every
// module row is the inclusive sum of its tensors and the categories add up to the peak, as in a
// real snapshot.
//   node bench/synthetic-snapshot.mjs TENSORS OUT.json
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const CATEGORIES = ['parameter', 'buffer', 'gradient', 'optimizer_state', 'activation', 'temporary', 'input', 'other'];
const OPS = ['empty', 'addmm', 'mm', 'gelu', 'native_layer_norm', '_scaled_dot_product_flash_attention', 'add', 'mul', 'zeros_like', 'native_dropout', 'embedding', '_to_copy', 'view', 'cat'];
const DTYPES = ['bfloat16', 'float32', 'bool', 'int64'];

function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function cat() {
  return Object.fromEntries(CATEGORIES.map((c) => [c, 0]));
}

export function syntheticSnapshot(nTensors, { layers = 32, seed = 1 } = {}) {
  const random = rng(seed);
  const pick = (arr) => arr[Math.floor(random() * arr.length)];

  // Modules, sorted by depth then name as the engine writes them.
  const names = [['', 'Transformer'], ['embed', 'Embedding'], ['layers', 'ModuleList'], ['norm', 'RMSNorm'], ['head', 'Linear']];
  for (let i = 0; i < layers; i++) names.push([`layers.${i}`, 'Block']);
  for (let i = 0; i < layers; i++) {
    for (const [n, c] of [['attn', 'Attention'], ['mlp', 'MLP'], ['norm1', 'RMSNorm'], ['norm2', 'RMSNorm']]) names.push([`layers.${i}.${n}`, c]);
  }
  for (let i = 0; i < layers; i++) {
    for (const [n, c] of [['attn.qkv', 'Linear'], ['attn.out', 'Linear'], ['mlp.up', 'Linear'], ['mlp.gate', 'Linear'], ['mlp.down', 'Linear']]) names.push([`layers.${i}.${n}`, c]);
  }
  const modules = names.map(([fqn, cls]) => ({
    fqn,
    class: cls,
    source: { file: '/work/project/model.py', line: 10 + (cls.length * 7) % 90 },
    constructed_at: fqn ? { file: '/work/project/model.py', line: 100 + fqn.length } : null,
    group: fqn.replace(/\.\d+(?=\.|$)/g, '.*'),
    parameter_bytes: 0, buffer_bytes: 0, gradient_bytes: 0, optimizer_state_bytes: 0,
    activation_bytes: 0, temporary_bytes: 0, input_bytes: 0, other_bytes: 0,
    at_peak: cat(),
    forward_peak_bytes: 0,
    backward_peak_bytes: 0,
  }));
  const index = new Map(modules.map((m, i) => [m.fqn, i]));
  const leaves = modules.map((m, i) => [m, i]).filter(([m]) => ['Linear', 'RMSNorm', 'Embedding'].includes(m.class) || m.fqn === '').map(([, i]) => i);

  // Phases: set-up, then two iterations of forward+backward and optimizer step.
  const eventsPerTensor = 3;
  const events = Math.max(2000, nTensors * eventsPerTensor);
  const bounds = [0, 0.05, 0.35, 0.5, 0.85, 1].map((f) => Math.round(f * events));
  const phaseNames = ['setup_model_and_optimizer', 'forward_backward_iter_0', 'optimizer_step_iter_0', 'forward_backward_iter_1', 'optimizer_step_iter_1'];

  // Frames and stacks: a handful of user lines.
  const frames = [];
  for (let l = 0; l < 60; l++) frames.push({ file: l % 3 ? '/work/project/model.py' : '/work/project/train.py', line: 20 + l * 3, name: l % 3 ? 'forward' : '<module>' });
  const stacks = [[]];
  for (let s = 0; s < 200; s++) stacks.push([Math.floor(random() * 40) + 20, Math.floor(random() * 20)]);

  const tensors = [];
  for (let i = 0; i < nTensors; i++) {
    const r = random();
    const category = r < 0.15 ? 'parameter' : r < 0.2 ? 'gradient' : r < 0.32 ? 'optimizer_state' : r < 0.8 ? 'activation' : r < 0.97 ? 'temporary' : r < 0.99 ? 'input' : 'other';
    const d0 = 1 + Math.floor(random() * 64);
    const d1 = 64 * (1 + Math.floor(random() * 64));
    const dtype = category === 'activation' ? pick(['bfloat16', 'bfloat16', 'bool']) : category === 'input' ? 'int64' : pick(DTYPES.slice(0, 2));
    const size = { bfloat16: 2, float32: 4, bool: 1, int64: 8 }[dtype];
    const bytes = Math.ceil((d0 * d1 * size) / 512) * 512;
    const module = category === 'input' ? -1 : pick(leaves);
    const phase = category === 'parameter' ? 0 : category === 'optimizer_state' ? 2 : 3;
    tensors.push({ id: 0, bytes, requested_bytes: d0 * d1 * size, shape: [d0, d1], dtype, category, module, phase, op: category === 'parameter' ? 'empty' : pick(OPS), stack: 1 + Math.floor(random() * 200) });
  }
  tensors.sort((a, b) => b.bytes - a.bytes);

  // Inclusive module bytes.
  const chain = (fqn) => {
    const out = [''];
    const parts = fqn ? fqn.split('.') : [];
    for (let k = 1; k <= parts.length; k++) out.push(parts.slice(0, k).join('.'));
    return [...new Set(out)];
  };
  const atPeak = cat();
  for (const t of tensors) {
    atPeak[t.category] += t.bytes;
    if (t.module < 0) continue;
    for (const name of chain(modules[t.module].fqn)) {
      const m = modules[index.get(name)];
      m.at_peak[t.category] += t.bytes;
      m[`${t.category}_bytes`] += t.bytes;
    }
  }
  const peak = Object.values(atPeak).reduce((a, b) => a + b, 0);

  // Allocation stream: each live tensor plus as many short-lived ones; ids index into it.
  const nAlloc = nTensors * 2;
  const peakSeq = bounds[3] + Math.floor((bounds[4] - bounds[3]) * 0.4);
  const alloc = { devices: ['cuda:0'], device: [], bytes: [], requested_bytes: [], category: [], module: [], op: [], stack: [], stream: [], alloc_seq: [], free_seq: [] };
  const liveSlots = new Set();
  while (liveSlots.size < nTensors) liveSlots.add(Math.floor(random() * nAlloc));
  const slots = [...liveSlots].sort((a, b) => a - b);
  let t = 0;
  const liveAt = new Map(slots.map((s) => [s, t++]));
  const order = tensors.map((_, i) => i).sort(() => random() - 0.5);
  let k = 0;
  for (let a = 0; a < nAlloc; a++) {
    const seq = Math.floor((a * peakSeq) / nAlloc);
    const live = liveAt.has(a);
    const tensor = live ? tensors[order[k++]] : null;
    if (tensor) tensor.id = a;
    alloc.device.push(0);
    alloc.bytes.push(tensor ? tensor.bytes : 512 * (1 + Math.floor(random() * 1000)));
    alloc.requested_bytes.push(alloc.bytes.at(-1));
    alloc.category.push(CATEGORIES.indexOf(tensor ? tensor.category : 'temporary'));
    alloc.module.push(tensor ? tensor.module : pick(leaves));
    alloc.op.push(Math.floor(random() * OPS.length));
    alloc.stack.push(tensor ? tensor.stack : 1 + Math.floor(random() * 200));
    alloc.stream.push(0);
    alloc.alloc_seq.push(seq);
    alloc.free_seq.push(live ? peakSeq + 1 + Math.floor(random() * (events - peakSeq - 2)) : Math.min(events - 1, seq + 1 + Math.floor(random() * 50)));
  }
  const peakTensor = tensors.findIndex((x) => x.category !== 'parameter');

  // Timeline: 2,000 points, rising to the peak in each forward/backward.
  const points = [];
  const nPoints = 2000;
  for (let p = 0; p < nPoints; p++) {
    const seq = Math.round((p * (events - 1)) / (nPoints - 1));
    const f = seq === peakSeq ? 1 : Math.max(0.05, 1 - Math.abs(seq - peakSeq) / events) * (0.6 + 0.35 * random());
    const row = CATEGORIES.map((c) => Math.floor(atPeak[c] * (c === 'parameter' ? 1 : f)));
    const total = row.reduce((a, b) => a + b, 0);
    points.push([seq, total, ...row]);
  }
  const peakPoint = [peakSeq, peak, ...CATEGORIES.map((c) => atPeak[c])];
  const at = points.findIndex((r) => r[0] >= peakSeq);
  if (points[at][0] === peakSeq) points[at] = peakPoint;
  else points.splice(at, 0, peakPoint);

  const phases = phaseNames.map((name, i) => ({
    name,
    device: 'cuda:0',
    start_seq: bounds[i],
    end_seq: bounds[i + 1],
    current_before_bytes: i === 0 ? 0 : Math.floor(peak * 0.3),
    current_after_bytes: Math.floor(peak * 0.3),
    peak_bytes: i === 3 ? peak : Math.floor(peak * (0.4 + 0.1 * i)),
    peak_seq: i === 3 ? peakSeq : bounds[i] + 1,
    categories_before: cat(),
    categories_after: cat(),
    categories_at_peak: i === 3 ? { ...atPeak } : cat(),
  }));

  return {
    format: 'memlens.snapshot',
    version: 1,
    meta: {
      tool: 'memlens', tool_version: '0.1.0', torch_version: '2.13.0', python_version: '3.11.7',
      created: '2026-01-01T00:00:00+00:00',
      command: ['memlens', 'synthetic', String(nTensors)],
      target: { kind: 'script', name: `synthetic-${nTensors}`, path: '/work/project/train.py', args: [], cwd: null },
      device: { name: 'h100-80gb', display_name: 'NVIDIA H100 80GB HBM3', type: 'cuda', total_memory_bytes: 85520809984, compute_capability: [9, 0], sm_count: 132, rounding_bytes: 512 },
      device_key: 'cuda:0', world_size: 1, rank: 0, parallel: {}, precision: 'bf16', iterations: 2,
      stopped_after_iterations: true, duration_s: 1,
    },
    summary: {
      peak_bytes: peak, peak_seq: peakSeq, peak_phase: phaseNames[3], peak_tensor: Math.max(0, peakTensor),
      categories_at_peak: atPeak, category_peaks: { ...atPeak }, final_bytes: 0,
      total_allocated_bytes: alloc.bytes.reduce((a, b) => a + b, 0), allocation_count: nAlloc,
      devices: { 'cuda:0': { peak_bytes: peak, final_bytes: 0 } }, placeholders: [],
    },
    phases,
    modules,
    lines: frames.slice(0, 40).map((f, i) => ({ file: f.file, line: f.line, bytes_at_peak: Math.floor(peak / (i + 2) / 2), total_bytes: Math.floor(peak / (i + 1)), allocations: 10 + i })),
    tensors,
    ops: OPS,
    frames,
    stacks,
    timeline: { columns: ['seq', 'total', ...CATEGORIES], points, events },
    allocations: alloc,
  };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [n, out] = process.argv.slice(2);
  if (!n || !out) {
    console.error('usage: node bench/synthetic-snapshot.mjs TENSORS OUT.json');
    process.exit(2);
  }
  writeFileSync(out, JSON.stringify(syntheticSnapshot(Number(n))));
  console.log(`wrote ${out}`);
}
