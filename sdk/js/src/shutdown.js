// `status.shutdownIn`: the time left before `spec.shutdownTime`, coarse, and a requeue at the
// next change of what is shown.

const MINUTE = 60n;
const HOUR = 60n * MINUTE;
const DAY = 24n * HOUR;
const WEEK = 7n * DAY;
const LADDER = [
  [3n * DAY, "3d"],
  [2n * DAY, "2d"],
  [DAY, "1d"],
  [12n * HOUR, "12h"],
  [5n * HOUR, "5h"],
  [2n * HOUR, "2h"],
  [HOUR, "1h"],
  [40n * MINUTE, "40m"],
  [20n * MINUTE, "20m"],
  [10n * MINUTE, "10m"],
];
export const PASSED = "passed";
export const UNDER_TEN_MINUTES = "<10m";

/** What `left` seconds (a BigInt) show, and in how many seconds that changes (undefined: never). */
export function bucket(left) {
  if (left <= 0n) return [PASSED, undefined];
  if (left >= WEEK) {
    const bound = (left / WEEK) * WEEK;
    return [`${bound / DAY}d`, left - bound + 1n];
  }
  for (const [bound, shown] of LADDER) {
    if (left >= bound) return [shown, left - bound + 1n];
  }
  return [UNDER_TEN_MINUTES, left];
}

const U32_MAX = 0xffffffff;

/** Sets `status.shutdownIn` of `out`, and its requeue to the next change of it. */
export function report(out, sandbox, now) {
  const at = sandbox.spec.shutdownTime;
  if (at == null) {
    out.status.shutdownIn = undefined;
    return;
  }
  const [shown, next] = bucket(at - now);
  out.status.shutdownIn = shown;
  if (next !== undefined) {
    const seconds = next > BigInt(U32_MAX) ? U32_MAX : Number(next);
    const asked = out.requeueAfterSeconds;
    out.requeueAfterSeconds = asked != null ? Math.min(asked, seconds) : seconds;
  }
}
