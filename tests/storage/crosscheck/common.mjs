// SPDX-License-Identifier: LGPL-2.1-or-later
// Shared by aws.mjs and oss.mjs: the case table, a fixed clock and the "id<TAB>field<TAB>value" output.
import { readFileSync } from "node:fs";

export function loadCases(path) {
  return JSON.parse(readFileSync(path ?? new URL("cases.json", import.meta.url), "utf8"));
}

// Replace the global Date so that "now" is the table's fixed instant for every library, including
// the ones that take no clock parameter (ali-oss, the S3 client's header signing). Must run before
// the libraries are imported. Returns the instant in milliseconds.
export function installFixedClock(iso) {
  const fixed = Date.parse(iso);
  if (Number.isNaN(fixed)) throw new Error(`bad "now": ${iso}`);
  const RealDate = Date;
  class FixedDate extends RealDate {
    constructor(...args) {
      if (args.length === 0) super(fixed);
      else super(...args);
    }
    static now() {
      return fixed;
    }
  }
  globalThis.Date = FixedDate;
  return fixed;
}

export function emit(id, field, value) {
  const v = String(value);
  if (/[\t\n\r]/.test(v)) throw new Error(`${id} ${field}: value contains a tab or newline`);
  process.stdout.write(`${id}\t${field}\t${v}\n`);
}

// [[name, value], ...] → { name: value } (null/undefined → ""); repeated names become arrays.
export function pairsToObject(pairs = []) {
  const o = {};
  for (const [k, v] of pairs) {
    const value = v ?? "";
    if (k in o) o[k] = [].concat(o[k], value);
    else o[k] = value;
  }
  return o;
}
