#!/usr/bin/env node
// SPDX-License-Identifier: LGPL-2.1-or-later
// Prints what the official Aliyun OSS SDK (ali-oss, with its default version 1 signatures) signs for the
// "oss" cases of cases.json: the Authorization header of the requests it would send, and signatureUrl().
import { emit, installFixedClock, loadCases } from "./common.mjs";

const cases = loadCases(process.argv[2]);
installFixedClock(cases.now);

const OSS = (await import("ali-oss")).default;

class Captured extends Error {}

function makeClient(c, onRequest) {
  return new OSS({
    ...c,
    accessKeyId: cases.oss_credentials.accessKeyId,
    accessKeySecret: cases.oss_credentials.accessKeySecret,
    // ali-oss sends requests through options.urllib when given one: capture instead of sending.
    urllib: {
      request: async (url, params) => {
        onRequest(url, params);
        throw new Captured();
      },
    },
  });
}

// { "$buffer": "text" } stands for a Buffer argument.
const args = (list) => list.map((a) => (a && typeof a === "object" && "$buffer" in a ? Buffer.from(a.$buffer) : a));

for (const c of cases.oss ?? []) {
  if (c.mode === "header") {
    let url, params;
    try {
      await makeClient(c.client, (u, p) => ((url = u), (params = p)))[c.sdk.call](...args(c.sdk.args));
    } catch (e) {
      if (!url) throw e;
    }
    if (process.env.CROSSCHECK_DEBUG) console.error(c.id, params.method, JSON.stringify(params.headers));
    emit(c.id, "url", url);
    emit(c.id, "authorization", params.headers.authorization);
    emit(c.id, "x-oss-date", params.headers["x-oss-date"]);
  } else if (c.mode === "url") {
    emit(c.id, "url", makeClient(c.client, () => {})[c.sdk.call](...args(c.sdk.args)));
  } else throw new Error(`${c.id}: unknown mode ${c.mode}`);
}
