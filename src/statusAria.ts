// What a screen reader says for the status bar item when it shows a snapshot: plain sentences,
// not the tooltip's markdown (`**Peak …**`) nor the text's codicon (`$(pulse)`). No `vscode`
// import: unit-tested with plain Node.
import { formatBytes } from '../common/format';
import { verdictOf } from '../common/headroom';
import type { SnapshotInfo } from '../common/protocol';

export function snapshotAriaLabel(s: SnapshotInfo): string {
  const parts = [`Memlens: peak ${formatBytes(s.peakBytes)} of ${formatBytes(s.budgetBytes)} on ${s.device}`];
  if (s.worldSize > 1) parts.push(`rank ${s.rank} of ${s.worldSize}`);
  const verdict = verdictOf({ fits: s.fits, headroom_bytes: s.headroomBytes });
  if (verdict) parts.push(verdict.fits ? `fits, ${formatBytes(verdict.headroomBytes)} headroom` : `does not fit, over by ${formatBytes(-verdict.headroomBytes)}`);
  return `${parts.join(', ')}. ${s.targetName}. Activate to open the memory report.`;
}
