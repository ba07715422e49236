// CIDR ranges: parsing as Rust's std parses addresses, containment, the IPv6 forms that carry an
// IPv4 range, and the minimal except lists of a NetworkPolicy's ipBlocks. Addresses are BigInt
// (128 bits for both families).

const MAX = (1n << 128n) - 1n;

/** A range: its family, first address, prefix length and last address. */
export class Cidr {
  constructor(v6, value, prefix) {
    const bits = v6 ? 128n : 32n;
    const hostMask = (1n << (bits - BigInt(prefix))) - 1n;
    this.v6 = v6;
    this.network = value & (MAX ^ hostMask);
    this.prefix = prefix;
    this.last = value | hostMask;
  }

  static v4(octets, prefix) {
    const value = octets.reduce((v, o) => (v << 8n) | BigInt(o), 0n);
    return new Cidr(false, value, prefix);
  }

  static v6(value, prefix) {
    return new Cidr(true, value, prefix);
  }

  /** `text` ("10.0.0.0/8", "fc00::/7") as a range; undefined if it is not one. */
  static parse(text) {
    const slash = text.indexOf("/");
    if (slash < 0) return undefined;
    const address = text.slice(0, slash);
    const prefixText = text.slice(slash + 1);
    if (!/^[0-9]{1,3}$/.test(prefixText)) return undefined;
    const prefix = Number(prefixText);
    if (prefix > 255) return undefined;
    const v4 = parseV4(address);
    if (v4 !== undefined) return prefix > 32 ? undefined : new Cidr(false, v4, prefix);
    const v6 = parseV6(address);
    if (v6 !== undefined) return prefix > 128 ? undefined : new Cidr(true, v6, prefix);
    return undefined;
  }

  contains(other) {
    return this.v6 === other.v6 && this.network <= other.network && other.last <= this.last;
  }

  equals(other) {
    return this.v6 === other.v6 && this.network === other.network && this.prefix === other.prefix;
  }

  /** The range in each IPv6 form that carries an IPv4 address; undefined for an IPv6 range. */
  v4Forms() {
    if (this.v6) return undefined;
    const hostBits = 32 - this.prefix;
    return EMBEDDINGS.map(({ prefix, shift }) =>
      Cidr.v6(prefix | (this.network << BigInt(shift)), 128 - (hostBits + shift)),
    );
  }

  /** As Rust's std writes the address (RFC 5952 for IPv6), then the prefix length. */
  toString() {
    if (!this.v6) return `${v4Text(this.network)}/${this.prefix}`;
    return `${v6Text(this.network)}/${this.prefix}`;
  }
}

/** The IPv6 forms of an IPv4 address, each with how far it shifts the address. */
export const EMBEDDINGS = Object.freeze([
  { name: "IPv4-mapped (::ffff:0:0/96)", prefix: 0xffffn << 32n, shift: 0 },
  { name: "IPv4-translated (::ffff:0:0:0/96)", prefix: 0xffffn << 48n, shift: 0 },
  { name: "IPv4-compatible (::/96)", prefix: 0n, shift: 0 },
  { name: "NAT64 (64:ff9b::/96)", prefix: 0x64ff9bn << 96n, shift: 0 },
  { name: "6to4 (2002::/16)", prefix: 0x2002n << 112n, shift: 80 },
]);

/** NAT64's local-use prefix (RFC 8215), which may carry any IPv4 address. */
export const NAT64_LOCAL = Cidr.v6(0x64ff9b0001n << 80n, 48);

/**
 * The excepts of an ipBlock of `cidr`: the texts of the `cuts` ([range, text] pairs; a text
 * left undefined is the range's own, written only if kept) inside it, without those another cut
 * already covers; undefined when a cut covers `cidr` itself.
 *
 * Ranges either nest or are apart, so a cut is covered when a cut before it in the order of
 * (family, first address, last address from the widest) reaches as far: the covering cut is
 * the widest among those. Equal cuts are ordered by their place, so that the first is kept. One
 * sort and one pass, not every cut against every other: an interpreter pays for each BigInt
 * comparison, and the internet egress has some 120 cuts.
 */
export function excepts(cidr, cuts) {
  if (cuts.some(([cut]) => cut.contains(cidr))) return undefined;
  const order = cuts.map((_, i) => i);
  order.sort((i, j) => {
    const [a, b] = [cuts[i][0], cuts[j][0]];
    if (a.v6 !== b.v6) return a.v6 ? 1 : -1;
    if (a.network !== b.network) return a.network < b.network ? -1 : 1;
    if (a.last !== b.last) return a.last > b.last ? -1 : 1;
    return i - j;
  });
  const covered = new Array(cuts.length).fill(false);
  let reach = { v6: undefined, last: -1n };
  for (const i of order) {
    const cut = cuts[i][0];
    if (reach.v6 === cut.v6 && reach.last >= cut.last) covered[i] = true;
    else reach = { v6: cut.v6, last: cut.last };
  }
  const kept = [];
  cuts.forEach(([cut, text], i) => {
    if (cidr.contains(cut) && !covered[i]) kept.push(text ?? cut.toString());
  });
  return kept;
}

function parseV4(text) {
  const parts = text.split(".");
  if (parts.length !== 4) return undefined;
  let value = 0n;
  for (const part of parts) {
    if (!/^[0-9]{1,3}$/.test(part) || (part.length > 1 && part[0] === "0")) return undefined;
    const octet = Number(part);
    if (octet > 255) return undefined;
    value = (value << 8n) | BigInt(octet);
  }
  return value;
}

/** Groups of 1-4 hex digits, an IPv4 address allowed in the last two; undefined if not. */
function groups(text, allowV4) {
  if (text === "") return [];
  const parts = text.split(":");
  const out = [];
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i];
    if (allowV4 && i === parts.length - 1 && part.includes(".")) {
      const v4 = parseV4(part);
      if (v4 === undefined) return undefined;
      out.push(Number(v4 >> 16n), Number(v4 & 0xffffn));
    } else if (/^[0-9a-fA-F]{1,4}$/.test(part)) {
      out.push(parseInt(part, 16));
    } else {
      return undefined;
    }
  }
  return out;
}

function parseV6(text) {
  const halves = text.split("::");
  let all;
  if (halves.length > 2) return undefined;
  if (halves.length === 2) {
    const head = groups(halves[0], false);
    const tail = groups(halves[1], true);
    if (head === undefined || tail === undefined || head.length + tail.length > 7) return undefined;
    all = [...head, ...new Array(8 - head.length - tail.length).fill(0), ...tail];
  } else {
    all = groups(text, true);
    if (all === undefined || all.length !== 8) return undefined;
  }
  return all.reduce((v, g) => (v << 16n) | BigInt(g), 0n);
}

function v4Text(value) {
  return [24n, 16n, 8n, 0n].map((s) => Number((value >> s) & 0xffn)).join(".");
}

function v6Text(value) {
  if (value >> 32n === 0xffffn) return `::ffff:${v4Text(value & 0xffffffffn)}`;
  const parts = [];
  for (let s = 112n; s >= 0n; s -= 16n) parts.push(Number((value >> s) & 0xffffn));
  // The first longest run of two or more zero groups becomes "::".
  let best = { at: -1, len: 0 };
  for (let i = 0; i < 8; ) {
    if (parts[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && parts[j] === 0) j++;
    if (j - i > best.len) best = { at: i, len: j - i };
    i = j;
  }
  const hex = (list) => list.map((p) => p.toString(16)).join(":");
  if (best.len < 2) return hex(parts);
  return `${hex(parts.slice(0, best.at))}::${hex(parts.slice(best.at + best.len))}`;
}
