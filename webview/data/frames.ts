// Creation stacks for people: the user's own frames first (the line to change), library frames
// after. The engine already keeps mostly user frames; this also copes with snapshots from other
// writers that keep everything.
import type { Frame, Snapshot } from '../../common/snapshot';

export interface FrameRef {
  /** Index into `snapshot.frames`. */
  index: number;
  frame: Frame;
  user: boolean;
}

// torch and memlens themselves, the standard library, and interpreter pseudo-files.
const LIBRARY = [
  /[\\/](site|dist)-packages[\\/](torch|memlens|torchgen|functorch)[\\/]/,
  /[\\/]lib[\\/]python\d\.\d+[\\/](?!site-packages[\\/]|dist-packages[\\/])/,
  /^<.*>$/,
];

export function isUserFrame(file: string): boolean {
  return !LIBRARY.some((re) => re.test(file));
}

/** The stack's frames, innermost first within each part: user frames, then library frames. */
export function orderedStack(s: Snapshot, stack: number): FrameRef[] {
  const ids = s.stacks[stack] ?? [];
  const refs = ids.flatMap((index): FrameRef[] => {
    const frame = s.frames[index];
    return frame ? [{ index, frame, user: isUserFrame(frame.file) }] : [];
  });
  return [...refs.filter((r) => r.user), ...refs.filter((r) => !r.user)];
}

/** The innermost user frame of a stack (the line a tensor is attributed to), or null. */
export function firstUserFrame(s: Snapshot, stack: number): Frame | null {
  for (const index of s.stacks[stack] ?? []) {
    const frame = s.frames[index];
    if (frame && isUserFrame(frame.file)) return frame;
  }
  return null;
}
