// What the notification at the end of a successful trace says: the peak, on which device, and
// the snapshot's verdict, so that a trace never ends in silence (one started with the cursor in
// `main()` paints nothing under the cursor). No `vscode` import: unit-tested with plain Node.
import { formatBytes } from '../common/format';
import { verdictOf } from '../common/headroom';
import type { SnapshotInfo } from '../common/protocol';

export const OPEN_REPORT = 'Open Report';

export function traceDoneMessage(name: string, s: SnapshotInfo): string {
  const rank = s.worldSize > 1 ? `, rank ${s.rank} of ${s.worldSize}` : '';
  const verdict = verdictOf({ fits: s.fits, headroom_bytes: s.headroomBytes });
  const said = !verdict
    ? ''
    : verdict.fits
      ? ` — fits, ${formatBytes(verdict.headroomBytes)} headroom`
      : ` — does not fit, over by ${formatBytes(-verdict.headroomBytes)}`;
  return `Memlens: ${name} traced. Peak ${formatBytes(s.peakBytes)} on ${s.device}${rank}${said}.`;
}
