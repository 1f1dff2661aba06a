// The language server's SnapshotInfo of a one-GPU script trace (train.py), for unit tests of
// what the extension says about a trace; a test overrides what it is about (the device, ...).
import type { SnapshotInfo } from '../../common/protocol';

export const GiB = 2 ** 30;

export function snapshotInfo(overrides: Partial<SnapshotInfo> = {}): SnapshotInfo {
  return {
    path: '/ws/.memlens/script-train.py-1/s.json', uri: 'file:///ws/.memlens/script-train.py-1/s.json', targetId: 'script:train.py',
    targetName: 'train.py', kind: 'script', created: '2026-12-02T03:00:00+00:00', peakBytes: 7.8 * GiB, peakPhase: 'forward_backward_iter_1',
    device: 'h100-80gb', deviceTotalBytes: 80 * GiB, budgetBytes: 80 * GiB, fits: true, headroomBytes: 70.7 * GiB, rank: 0, worldSize: 1,
    ...overrides,
  };
}
