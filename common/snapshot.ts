// The snapshot document (docs/snapshot-format.md, python/memlens/snapshot/schema.json) as
// TypeScript types. Every size is an integer number of bytes; indices point into the tables of
// the same document, -1 meaning "none". Only validate.ts turns untrusted JSON into a Snapshot.

export const CATEGORIES = [
  'parameter',
  'buffer',
  'gradient',
  'optimizer_state',
  'activation',
  'temporary',
  'input',
  'other',
] as const;

export type Category = (typeof CATEGORIES)[number];
export type CategoryBytes = Record<Category, number>;

export interface Position {
  file: string;
  line: number;
}

export interface Device {
  name: string;
  display_name?: string;
  type: 'cuda' | 'cpu';
  total_memory_bytes: number;
  compute_capability?: [number, number] | null;
  sm_count?: number | null;
  rounding_bytes: number;
}

export interface Target {
  kind: 'script' | 'model' | 'launch';
  name: string;
  path?: string | null;
  args?: string[];
  cwd?: string | null;
}

export interface Meta {
  tool: string;
  tool_version: string;
  torch_version: string;
  python_version?: string;
  created: string;
  command?: string[];
  target?: Target;
  device: Device;
  device_key: string;
  world_size: number;
  rank: number;
  parallel?: Record<string, unknown>;
  precision?: string | null;
  iterations: number; // requested
  iterations_traced?: number; // begun (older snapshots: absent)
  iteration_unit?: string; // 'optimizer steps' | 'backward passes' | 'forward passes'
  interrupted?: boolean;
  stopped_after_iterations?: boolean;
  duration_s?: number;
  notes?: string[];
  compiled_regions?: CompiledRegion[];
  layer_replay?: LayerReplay;
}

/** Repeated blocks replayed from a recording (docs/snapshot-format.md, meta.layer_replay). */
export interface LayerReplay {
  enabled: boolean;
  abandoned?: string; // a replay was found wrong: the trace ran again in full
  off?: string; // why no repeated blocks were looked for (a distributed job)
  groups?: { module: string; blocks: number; traced_in_full?: string }[];
  replayed_forward?: number;
  replayed_backward?: number;
}

/** One torch.compile call site (docs/snapshot-format.md, meta.compiled_regions). */
export interface CompiledRegion {
  place: string; // file:line of the compile call
  call: string;
  compiled_as: 'inductor' | 'partitioner' | 'eager';
  graphs: number;
  graph_breaks: number;
  saved_bytes: number; // saved for backward by the compiled program
  eager_saved_bytes: number; // the same graphs as eager autograd would save
  eager_because?: string;
  cuda_graphs?: true; // its mode asked for CUDA graphs: Inductor's CUDA graph trees ran its graphs
}

export interface Placeholder {
  file?: string | null;
  line?: number | null;
  op: string;
  value: unknown;
}

export interface Summary {
  peak_bytes: number;
  peak_seq: number;
  peak_phase: string | null;
  peak_tensor: number;
  categories_at_peak: CategoryBytes;
  category_peaks: CategoryBytes;
  final_bytes: number;
  total_allocated_bytes: number;
  allocation_count: number;
  /** Finer names for some bytes of one category ("fp8 weights/scales" of the parameters). */
  subcategories?: Subcategory[];
  devices?: Record<string, { peak_bytes: number; final_bytes: number }>;
  placeholders?: Placeholder[];
  /** The allocation that did not fit, where the trace stopped (only `stack` is an index). */
  oom?: { stack?: number } | null;
  /** CUDA targets: the allocator model's reserved peak and the rows next to it. */
  reserved_peak_bytes?: number | null;
  outside_allocator?: OutsideItem[] | null;
  /** The verdict (common/headroom.ts): the device's memory less reserved peak + outside. */
  fits?: boolean;
  headroom_bytes?: number;
}

/** Bytes of one category that have a name of their own; the category's total counts them. */
export interface Subcategory {
  name: string;
  label: string;
  category: Category;
  at_peak_bytes: number;
  peak_bytes: number;
}

/** A line item next to the allocator's memory (CUDA context, cuBLAS workspace, NCCL buffers). */
export interface OutsideItem {
  label: string;
  bytes: number;
  basis: string;
  short_basis?: string;
  counted_by_allocator: boolean;
}

export interface Phase {
  name: string;
  device: string;
  start_seq: number;
  end_seq: number;
  current_before_bytes: number;
  current_after_bytes: number;
  peak_bytes: number;
  peak_seq?: number;
  categories_before?: CategoryBytes;
  categories_after?: CategoryBytes;
  categories_at_peak?: CategoryBytes;
}

export interface ModuleRow {
  fqn: string;
  class: string;
  source?: Position | null;
  constructed_at?: Position | null;
  group: string;
  parameter_bytes: number;
  buffer_bytes: number;
  gradient_bytes: number;
  optimizer_state_bytes: number;
  activation_bytes: number;
  temporary_bytes: number;
  input_bytes: number;
  other_bytes: number;
  at_peak: CategoryBytes;
  forward_peak_bytes: number;
  backward_peak_bytes: number;
}

export interface LineRow {
  file: string;
  line: number;
  bytes_at_peak: number;
  total_bytes: number;
  allocations: number;
}

export interface TensorRow {
  id: number;
  bytes: number;
  requested_bytes?: number;
  shape: number[];
  dtype: string;
  category: Category;
  module: number;
  phase: number;
  op: string;
  stack: number;
  /** The name of a subcategory (Summary.subcategories) these bytes are in. */
  subcategory?: string;
}

export interface Frame {
  file: string;
  line: number;
  name: string;
}

export interface Timeline {
  columns: string[];
  points: number[][];
  events: number;
  /** CUDA targets: each stream whose pool held a segment, and its reserved-bytes column. */
  streams?: TimelineStream[];
}

export interface TimelineStream {
  id: number;
  /** What the stream was assigned to where it was made ("default stream" for stream 0). */
  name: string;
  /** "file:line" where it was made, or null. */
  place?: string | null;
  /** The column of `timeline.columns` holding its reserved bytes. */
  column: string;
}

export interface Allocations {
  devices: string[];
  device: number[];
  bytes: number[];
  requested_bytes: number[];
  category: number[];
  module: number[];
  op: number[];
  stack: number[];
  stream: number[];
  alloc_seq: number[];
  free_seq: number[];
  backward?: number[];
  /** Index into Summary.subcategories, -1 for none (only when there are subcategories). */
  subcategory?: number[];
}

export interface Snapshot {
  format: 'memlens.snapshot';
  version: 1;
  meta: Meta;
  summary: Summary;
  phases: Phase[];
  modules: ModuleRow[];
  lines: LineRow[];
  tensors: TensorRow[];
  ops: string[];
  frames: Frame[];
  stacks: number[][];
  timeline: Timeline;
  allocations?: Allocations | null;
}

/** The per-category field of a module row: `parameter` → `parameter_bytes`. */
export function moduleCategoryBytes(m: ModuleRow): CategoryBytes {
  return {
    parameter: m.parameter_bytes,
    buffer: m.buffer_bytes,
    gradient: m.gradient_bytes,
    optimizer_state: m.optimizer_state_bytes,
    activation: m.activation_bytes,
    temporary: m.temporary_bytes,
    input: m.input_bytes,
    other: m.other_bytes,
  };
}
