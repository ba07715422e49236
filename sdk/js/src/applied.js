// `SpecApplied`: what the running Pod was started with, and which of the Pod's fields the spec
// changed since (they apply at the next start).
import * as status from "./status.js";
import { quoted } from "./json.js";

export const SPEC_APPLIED = "SpecApplied";
export const STARTED = "Started";
export const PENDING_RESTART = "PendingRestart";

const STARTED_WITH = "the Pod was started with ";
const SEPARATOR = ", ";
const POD_FIELDS = ["spec.image", "spec.resources.cpu", "spec.resources.memory", "spec.runtimeClassName"];
const HOW_TO_APPLY =
  "pause and resume the sandbox (spec.desiredState Paused, then Running), or raise spec.rootfsGeneration by one to reset it";

const shown = (value) => (value != null ? quoted(value) : "unset");
const podValues = (spec) => [spec.image, spec.cpu, spec.memory, spec.runtimeClass].map(shown);

/** The message of `SpecApplied` for a Pod started from `spec`. */
export function record(spec) {
  const values = podValues(spec);
  return STARTED_WITH + POD_FIELDS.map((path, i) => `${path} ${values[i]}`).join(SEPARATOR);
}

/** The length of a value as `shown` wrote it at the start of `text`; undefined if none is. */
function shownLength(text) {
  if (text.startsWith("unset")) return 5;
  if (!text.startsWith('"')) return undefined;
  for (let at = 1; at < text.length; at++) {
    if (text[at] === "\\") at++;
    else if (text[at] === '"') return at + 1;
  }
  return undefined;
}

/** The values a record holds, and its length in `message`; undefined if it holds none. */
function recorded(message) {
  if (!message.startsWith(STARTED_WITH)) return undefined;
  let rest = message.slice(STARTED_WITH.length);
  const values = [];
  for (const [index, path] of POD_FIELDS.entries()) {
    if (index > 0) {
      if (!rest.startsWith(SEPARATOR)) return undefined;
      rest = rest.slice(SEPARATOR.length);
    }
    if (!rest.startsWith(`${path} `)) return undefined;
    rest = rest.slice(path.length + 1);
    const end = shownLength(rest);
    if (end === undefined) return undefined;
    values.push(rest.slice(0, end));
    rest = rest.slice(end);
  }
  return { values, length: message.length - rest.length };
}

/** A Pod was started from `spec` now. */
export function started(out, spec, now) {
  status.setCondition(out.status.conditions, SPEC_APPLIED, "true", STARTED, record(spec), now);
}

/** The Pod runs: `SpecApplied` says whether the spec still matches what it was started with. */
export function running(out, sandbox, now) {
  const spec = sandbox.spec;
  if (
    status.condition(out.status.conditions, SPEC_APPLIED) === undefined &&
    out.status.startedAt == null &&
    sandbox.generation === 1n
  ) {
    started(out, spec, now);
    return;
  }
  const conditions = out.status.conditions;
  const held = status.condition(conditions, SPEC_APPLIED);
  if (held === undefined) return;
  const then = recorded(held.message);
  if (then === undefined) return;
  const wanted = podValues(spec);
  const changed = POD_FIELDS.map((path, i) => [path, wanted[i]]).filter(([, value], i) => value !== then.values[i]);
  const recordText = held.message.slice(0, then.length);
  if (changed.length === 0) {
    status.setCondition(conditions, SPEC_APPLIED, "true", STARTED, recordText, now);
    return;
  }
  const fields = changed.map(([path, value]) => `${path} (now ${value})`);
  const paths = changed.map(([path]) => path);
  if (!status.holds(conditions, SPEC_APPLIED, "false", PENDING_RESTART)) {
    out.events.push(
      status.normal(
        PENDING_RESTART,
        `${paths.join(SEPARATOR)} changed while the sandbox runs; its Pod keeps what it was started with until the next start: ${HOW_TO_APPLY}`,
      ),
    );
  }
  status.setCondition(
    conditions,
    SPEC_APPLIED,
    "false",
    PENDING_RESTART,
    `${recordText}; changed since: ${fields.join(SEPARATOR)}, which the running Pod keeps until the next start: ${HOW_TO_APPLY}`,
    now,
  );
}

/** No Pod runs: nothing was applied. */
export function stopped(out) {
  out.status.conditions = out.status.conditions.filter((c) => c.kind !== SPEC_APPLIED);
}
