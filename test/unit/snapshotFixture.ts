// Small, consistent, schema-valid snapshots for unit tests: a GPT-like model (embedding, two
// repeated blocks, an output layer) plus a loss module and tensors of no module. Module rows are
// inclusive sums of the tensors made for them, as the engine writes them.
import type { CategoryBytes, ModuleRow, Snapshot, TensorRow } from '../../common/snapshot';
import { emptyCategoryBytes } from '../../webview/data/categories';
import { CATEGORIES } from '../../common/snapshot';

export function cat(partial: Partial<CategoryBytes> = {}): CategoryBytes {
  return { ...emptyCategoryBytes(), ...partial };
}

export interface FixtureOptions {
  /** Multiplies activations (batch size). */
  batch?: number;
  layers?: number;
}

/** [fqn, class, own bytes at the peak] */
type Own = [string, string, Partial<CategoryBytes>];

export function makeSnapshot(options: FixtureOptions = {}): Snapshot {
  const batch = options.batch ?? 1;
  const layers = options.layers ?? 2;
  const own: Own[] = [
    ['', 'GPT', { temporary: 4096 * batch }],
    ['wte', 'Embedding', { parameter: 1 << 20, optimizer_state: 2 << 20 }],
    ['drop', 'Dropout', {}],
    ['h', 'ModuleList', {}],
  ];
  for (let i = 0; i < layers; i++) {
    own.push([`h.${i}`, 'Block', { activation: 1000 * batch }]);
    own.push([`h.${i}.attn`, 'Attention', { parameter: 40000, gradient: 40000, activation: (20000 + i) * batch }]);
    own.push([`h.${i}.mlp`, 'MLP', { parameter: 80000, gradient: 80000, activation: 60000 * batch }]);
  }
  own.push(['lm_head', 'Linear', { parameter: 500000, activation: 300000 * batch }]);
  own.push(['CrossEntropyLoss', 'CrossEntropyLoss', { temporary: 1234 }]);

  const tensors: TensorRow[] = [];
  own.forEach(([, , bytes], module) => {
    for (const c of CATEGORIES) {
      const b = bytes[c] ?? 0;
      if (b) tensors.push({ id: 0, bytes: b, shape: [b], dtype: 'uint8', category: c, module, phase: c === 'parameter' || c === 'optimizer_state' ? 0 : 1, op: c === 'parameter' ? 'empty' : 'addmm', stack: 1 });
    }
  });
  tensors.push({ id: 0, bytes: 512 * batch, shape: [batch, 512], dtype: 'uint8', category: 'input', module: -1, phase: 1, op: 'randint', stack: 2 });
  tensors.sort((x, y) => y.bytes - x.bytes);
  tensors.forEach((t, i) => (t.id = i * 3));

  const modules: ModuleRow[] = own.map(([fqn, cls]) => ({
    fqn,
    class: cls,
    source: { file: '/src/model.py', line: 10 },
    constructed_at: fqn ? { file: '/src/model.py', line: 20 } : null,
    group: fqn.replace(/\.\d+(?=\.|$)/g, '.*'),
    parameter_bytes: 0,
    buffer_bytes: 0,
    gradient_bytes: 0,
    optimizer_state_bytes: 0,
    activation_bytes: 0,
    temporary_bytes: 0,
    input_bytes: 0,
    other_bytes: 0,
    at_peak: cat(),
    forward_peak_bytes: 0,
    backward_peak_bytes: 0,
  }));
  // Inclusive: every tensor counts for its module and the modules that contain it.
  const byName = new Map(modules.map((m, i) => [m.fqn, i]));
  for (const t of tensors) {
    if (t.module < 0) continue;
    const fqn = modules[t.module]!.fqn;
    const chain = fqn === 'CrossEntropyLoss' ? [fqn] : ['', ...fqn.split('.').map((_, i, p) => p.slice(0, i + 1).join('.'))];
    for (const name of new Set(chain.filter((n) => n !== '' || fqn !== 'CrossEntropyLoss'))) {
      const m = modules[byName.get(name)!]!;
      m.at_peak[t.category] += t.bytes;
      (m as unknown as Record<string, number>)[`${t.category}_bytes`]! += t.bytes;
    }
  }
  const atPeak = cat();
  for (const t of tensors) atPeak[t.category] += t.bytes;
  const peak = Object.values(atPeak).reduce((a, b) => a + b, 0);
  const phase = (name: string, start: number, end: number, peakBytes: number) => ({
    name,
    device: 'cuda:0',
    start_seq: start,
    end_seq: end,
    current_before_bytes: 0,
    current_after_bytes: 0,
    peak_bytes: peakBytes,
    peak_seq: start,
    categories_before: cat(),
    categories_after: cat(),
    categories_at_peak: cat(),
  });
  return {
    format: 'memlens.snapshot',
    version: 1,
    meta: {
      tool: 'memlens',
      tool_version: '0.1.0',
      torch_version: '2.13.0',
      created: '2026-01-01T00:00:00+00:00',
      command: ['memlens', 'run', '--', 'train.py', `--batch-size=${batch}`],
      target: { kind: 'script', name: 'train', path: 'train.py', args: [`--batch-size=${batch}`], cwd: null },
      device: { name: 'h100-80gb', display_name: 'NVIDIA H100 80GB', type: 'cuda', total_memory_bytes: 80 * 2 ** 30, compute_capability: [9, 0], sm_count: 132, rounding_bytes: 512 },
      device_key: 'cuda:0',
      world_size: 1,
      rank: 0,
      parallel: {},
      precision: null,
      iterations: 2,
    },
    summary: {
      peak_bytes: peak,
      peak_seq: 150,
      peak_phase: 'forward_backward_iter_0',
      peak_tensor: 0,
      categories_at_peak: atPeak,
      category_peaks: atPeak,
      final_bytes: 0,
      total_allocated_bytes: peak * 3,
      allocation_count: 100,
      devices: { 'cuda:0': { peak_bytes: peak, final_bytes: 0 } },
      placeholders: [],
    },
    phases: [
      phase('setup_model_and_optimizer', 0, 100, Math.floor(peak / 2)),
      phase('forward_backward_iter_0', 100, 200, peak),
      { ...phase('setup_model_and_optimizer', 0, 100, 8), device: 'cpu' },
    ],
    modules,
    lines: [{ file: '/src/model.py', line: 30, bytes_at_peak: peak, total_bytes: peak * 2, allocations: 7 }],
    tensors,
    ops: ['empty', 'addmm', 'randint'],
    frames: [
      { file: '/src/model.py', line: 30, name: 'forward' },
      { file: '/usr/lib/python3.11/site-packages/torch/nn/modules/module.py', line: 1775, name: '_call_impl' },
      { file: '/src/train.py', line: 12, name: '<module>' },
    ],
    stacks: [[], [1, 0, 2], [2]],
    timeline: {
      columns: ['seq', 'total', ...CATEGORIES],
      points: [
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        [150, peak, ...CATEGORIES.map((c) => atPeak[c])],
        [199, 0, 0, 0, 0, 0, 0, 0, 0, 0],
      ],
      events: 200,
    },
    allocations: null,
  };
}
