// Compact JSON, as the Rust SDK's writer (and serde_json) writes it: keys in the order they were
// inserted, fields whose value is `undefined` left out, BigInt written as its digits (s64 and u64
// of the contract are BigInt in JavaScript), strings as JSON.stringify escapes them (the same
// escapes as serde_json's).

/** `value` as compact JSON. */
export function toJson(value) {
  switch (typeof value) {
    case "string":
      return JSON.stringify(value);
    case "bigint":
      return value.toString();
    case "number":
    case "boolean":
      return String(value);
    case "object": {
      if (value === null) return "null";
      if (Array.isArray(value)) return `[${value.map(toJson).join(",")}]`;
      const fields = [];
      for (const [key, field] of Object.entries(value)) {
        if (field !== undefined) fields.push(`${JSON.stringify(key)}:${toJson(field)}`);
      }
      return `{${fields.join(",")}}`;
    }
    default:
      throw new TypeError(`toJson: a ${typeof value} has no JSON form`);
  }
}

/** The UTF-8 bytes of `text`, as a list of numbers. */
function utf8(text) {
  const bytes = [];
  for (const char of text) {
    const c = char.codePointAt(0);
    if (c < 0x80) bytes.push(c);
    else if (c < 0x800) bytes.push(0xc0 | (c >> 6), 0x80 | (c & 0x3f));
    else if (c < 0x10000) bytes.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 0x3f), 0x80 | (c & 0x3f));
    else
      bytes.push(
        0xf0 | (c >> 18),
        0x80 | ((c >> 12) & 0x3f),
        0x80 | ((c >> 6) & 0x3f),
        0x80 | (c & 0x3f),
      );
  }
  return bytes;
}

/**
 * FNV-1a (64 bits) of the UTF-8 bytes of `json`, as 16 lowercase hex digits: the digest the
 * `cubepod.io/spec-hash` annotation and the `cubepod.io/template-hash` label carry. In two 32-bit
 * halves, since a BigInt per byte is slow in an interpreter: the prime is 2^40 + 0x1b3.
 */
export function digest(json) {
  let hi = 0xcbf29ce4;
  let lo = 0x84222325;
  for (const b of utf8(json)) {
    lo = (lo ^ b) >>> 0;
    const low = lo * 0x1b3;
    const carry = Math.floor(low / 0x100000000);
    hi = (hi * 0x1b3 + carry + ((lo << 8) >>> 0)) >>> 0;
    lo = low >>> 0;
  }
  return hi.toString(16).padStart(8, "0") + lo.toString(16).padStart(8, "0");
}

/** Orders two strings as Rust orders `str`: by their UTF-8 bytes (code points). */
export function compareStrings(a, b) {
  if (a === b) return 0;
  const x = [...a];
  const y = [...b];
  const n = Math.min(x.length, y.length);
  for (let i = 0; i < n; i++) {
    const d = x[i].codePointAt(0) - y[i].codePointAt(0);
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

/** A map's entries as an object with sorted keys (a Rust BTreeMap); a later key wins. */
export function sortedMap(entries) {
  const map = new Map(entries);
  const out = {};
  for (const key of [...map.keys()].sort(compareStrings)) out[key] = map.get(key);
  return out;
}

/**
 * `text` as Rust's `{:?}` writes a string: quoted, with `"`, `\` and control characters escaped.
 * The messages of the default policy quote names and values so.
 */
export function quoted(text) {
  let out = '"';
  for (const char of text) {
    const c = char.codePointAt(0);
    if (char === '"') out += '\\"';
    else if (char === "\\") out += "\\\\";
    else if (char === "\n") out += "\\n";
    else if (char === "\r") out += "\\r";
    else if (char === "\t") out += "\\t";
    else if (c === 0) out += "\\0";
    else if (c < 0x20 || (c >= 0x7f && c < 0xa0)) out += `\\u{${c.toString(16)}}`;
    else out += char;
  }
  return out + '"';
}

/** Rust's `str::parse::<u32>()`: digits with an optional `+`, at most 2^32 - 1; else undefined. */
export function parseU32(text) {
  if (!/^\+?[0-9]+$/.test(text)) return undefined;
  const value = Number(text.replace(/^\+/, ""));
  return value <= 0xffffffff ? value : undefined;
}
