#!/usr/bin/env node
// SPDX-License-Identifier: LGPL-2.1-or-later
// Compares the "id<TAB>field<TAB>value" outputs of the official SDKs and of sign-tool, prints every
// difference readably and exits 1 if there is any (2 on unusable input).
import { readFileSync } from "node:fs";

const [officialPath, oursPath] = process.argv.slice(2);
if (!officialPath || !oursPath) {
  console.error("usage: compare.mjs OFFICIAL OURS");
  process.exit(2);
}

function parse(path) {
  const fields = new Map();
  const errors = [];
  for (const line of readFileSync(path, "utf8").split("\n")) {
    if (!line) continue;
    const [id, field, ...rest] = line.split("\t");
    if (!id || !field || rest.length === 0) {
      console.error(`${path}: malformed line: ${JSON.stringify(line)}`);
      process.exit(2);
    }
    if (field === "error") errors.push(`${id}: ${rest.join("\t")}`);
    else fields.set(`${id}\t${field}`, rest.join("\t"));
  }
  return { fields, errors };
}

const official = parse(officialPath);
const ours = parse(oursPath);
const cases = new Set([...official.fields.keys(), ...ours.fields.keys()].map((k) => k.split("\t")[0]));
let differences = 0;

for (const e of ours.errors) {
  console.log(`ERROR  ${e}`);
  differences++;
}
for (const key of new Set([...official.fields.keys(), ...ours.fields.keys()])) {
  const [id, field] = key.split("\t");
  const a = official.fields.get(key);
  const b = ours.fields.get(key);
  if (a === b) continue;
  differences++;
  if (a === undefined) console.log(`EXTRA  ${id} ${field}: only ours printed it\n         ours: ${b}`);
  else if (b === undefined) console.log(`MISS   ${id} ${field}: ours printed nothing\n     official: ${a}`);
  else {
    let i = 0;
    while (i < a.length && a[i] === b[i]) i++;
    console.log(`DIFF   ${id} ${field} (from character ${i})`);
    console.log(`     official: ${a}`);
    console.log(`         ours: ${b}`);
    console.log(`               ${" ".repeat(i)}^`);
  }
}

const compared = official.fields.size;
const summary = `${cases.size} cases, ${compared} values compared, ${differences} difference(s)`;
if (differences) {
  console.log(`FAIL: ${summary}`);
  process.exit(1);
}
console.log(`OK: ${summary}`);
