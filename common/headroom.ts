// The one verdict every view shows — the device's memory less (the caching allocator's reserved
// peak + the memory outside the allocator: CUDA context, cuBLAS workspaces, NCCL) — as the
// Python side computed it into the snapshot (snapshot/device_memory.py) and `memlens show`
// prints it. Views format it; none derives its own from the allocated peak (the panel once
// said "fits, 10.8 GiB headroom" where the CLI and Find What Fits said 6.8 GiB).
import type { Summary } from './snapshot';

export interface Verdict {
  fits: boolean;
  /** Negative when it does not fit: by how much the card is short. */
  headroomBytes: number;
}

/** The snapshot's verdict, or null for a snapshot that carries none (nothing to show then). */
export function verdictOf(summary: {
  fits?: Summary['fits'] | null | undefined;
  headroom_bytes?: Summary['headroom_bytes'] | null | undefined;
}): Verdict | null {
  const { fits, headroom_bytes: headroom } = summary;
  if (typeof fits !== 'boolean' || typeof headroom !== 'number') return null;
  return { fits, headroomBytes: headroom };
}
