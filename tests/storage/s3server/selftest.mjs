#!/usr/bin/env node
// SPDX-License-Identifier: LGPL-2.1-or-later
// Self-test of the S3 test server: the official AWS SDK (@aws-sdk/client-s3, @aws-sdk/s3-request-presigner,
// @smithy/signature-v4) and plain curl against servers started with ./run, and the signed examples of the
// S3 documentation replayed byte for byte (they break the circle of the SDK checking the SDK).
// Usage: node selftest.mjs   (or ./run selftest). Prints TAP; exit status 1 when a check fails.
import { spawnSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

const here = path.dirname(new URL(import.meta.url).pathname);
const RUN = path.join(here, "run");
const REGION = "us-east-1";
const BUCKET = "scopebox-test";
const CREDS = { accessKeyId: "AKIDSCOPEBOXTEST", secretAccessKey: "SelftestSecret/abcdefghij0123456789+XYZ" };

const s3 = await import("@aws-sdk/client-s3");
const { getSignedUrl } = await import("@aws-sdk/s3-request-presigner");
const { SignatureV4 } = await import("@smithy/signature-v4");
const { HttpRequest } = await import("@smithy/protocol-http");
const { Hash } = await import("@smithy/hash-node");

// ---------------------------------------------------------------------------------------------------
// TAP

let n = 0;
let failed = 0;
async function check(name, fn) {
  n++;
  const t0 = Date.now();
  let timer;
  try {
    await Promise.race([fn(), new Promise((_, reject) => (timer = setTimeout(() => reject(new Error("timed out after 120 s")), 120e3)))]);
    console.log(`ok ${n} - ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed++;
    console.log(`not ok ${n} - ${name}`);
    for (const line of String(e?.stack ?? e).split("\n").slice(0, 8)) console.log(`  # ${line}`);
  } finally {
    clearTimeout(timer);
  }
}

function assert(cond, message) {
  if (!cond) throw new Error(message);
}

function eq(actual, expected, what) {
  const a = JSON.stringify(actual);
  const b = JSON.stringify(expected);
  if (a !== b) throw new Error(`${what}: got ${a}, expected ${b}`);
}

async function rejects(promise, { name, status }, what) {
  try {
    await promise;
  } catch (e) {
    if (name !== undefined && e.name !== name) throw new Error(`${what}: error ${e.name} (${e.message}), expected ${name}`);
    if (status !== undefined && e.$metadata?.httpStatusCode !== status)
      throw new Error(`${what}: HTTP ${e.$metadata?.httpStatusCode}, expected ${status}`);
    return e;
  }
  throw new Error(`${what}: succeeded, expected ${name ?? status}`);
}

// ---------------------------------------------------------------------------------------------------
// Servers, clients, curl

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "s3server-selftest-"));
const started = [];

function run(...args) {
  const r = spawnSync(RUN, args, { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`run ${args.join(" ")}: ${r.stderr}`);
  return r.stdout.trim();
}

function startServer(name, port = 0, env = {}) {
  const dir = path.join(tmp, name);
  const t0 = process.hrtime.bigint();
  const r = spawnSync(RUN, ["start", String(port), dir], { encoding: "utf8", env: { ...process.env, ...env } });
  if (r.status !== 0) throw new Error(`run start: ${r.stderr}`);
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (!started.includes(dir)) started.push(dir);
  return { endpoint: r.stdout.trim(), dir, ms };
}

function cleanup() {
  for (const dir of started) spawnSync(RUN, ["stop", dir]);
  if (!process.env.SELFTEST_KEEP) fs.rmSync(tmp, { recursive: true, force: true });
  else console.log(`# kept ${tmp}`);
}

const quiet = { trace() {}, debug() {}, info() {}, warn() {}, error() {} };

// A client as the SDK is configured by default, except for retries; `sent` records the last request
// as it left the signer. `before` may edit the request before it is signed.
function client(endpoint, { credentials = CREDS, region = REGION, before, ...rest } = {}) {
  const c = new s3.S3Client({ region, endpoint, forcePathStyle: true, credentials, maxAttempts: 1, logger: quiet, ...rest });
  c.sent = null;
  c.middlewareStack.addRelativeTo(
    (next) => async (args) => {
      c.sent = { method: args.request.method, path: args.request.path, query: args.request.query, headers: { ...args.request.headers } };
      return next(args);
    },
    { relation: "after", toMiddleware: "httpSigningMiddleware", name: "selftestRecord" },
  );
  if (before)
    c.middlewareStack.addRelativeTo(
      (next) => async (args) => {
        before(args.request);
        return next(args);
      },
      { relation: "before", toMiddleware: "httpSigningMiddleware", name: "selftestBefore" },
    );
  return c;
}

function curl(url, { method = "GET", headers = {}, data, dataFile, timeout = 10 } = {}) {
  const args = ["-sS", "-g", "--max-time", String(timeout), "-X", method, "-D", "-", "-o", "-"];
  for (const [k, v] of Object.entries(headers)) args.push("-H", `${k}: ${v}`);
  if (dataFile !== undefined) args.push("--data-binary", `@${dataFile}`);
  else if (data !== undefined) args.push("--data-binary", "@-");
  args.push(url);
  const r = spawnSync("curl", args, { input: data, maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`curl ${url}: exit ${r.status} ${r.stderr}`);
  const out = r.stdout;
  // Skip "HTTP/1.1 100 Continue" blocks; the last header block is the response.
  let start = 0;
  let status;
  let end;
  for (;;) {
    end = out.indexOf("\r\n\r\n", start);
    status = Number(/^HTTP\/[\d.]+ (\d{3})/.exec(out.subarray(start, end).toString("latin1"))[1]);
    if (status !== 100) break;
    start = end + 4;
  }
  const head = out.subarray(start, end).toString("latin1");
  const h = {};
  for (const line of head.split("\r\n").slice(1)) {
    const i = line.indexOf(":");
    h[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
  }
  return { status, headers: h, body: out.subarray(end + 4) };
}

function errorCode(body) {
  return /<Code>([^<]*)<\/Code>/.exec(body.toString("utf8"))?.[1];
}

async function bodyOf(getResult) {
  return Buffer.from(await getResult.Body.transformToByteArray());
}

function sha256Hex(data) {
  return crypto.createHash("sha256").update(data).digest("hex");
}

// Signs a request with @smithy/signature-v4 directly, the way src/storage-agent builds them: path-style,
// x-amz-content-sha256 UNSIGNED-PAYLOAD or the body's hash. Returns fetch()'s response.
async function rawSigned(endpoint, { method = "GET", path: p, query = {}, headers = {}, body, payloadHash, signingDate, credentials = CREDS, tamper }) {
  const u = new URL(endpoint);
  const signer = new SignatureV4({ credentials, region: REGION, service: "s3", sha256: Hash.bind(null, "sha256"), uriEscapePath: false });
  const req = new HttpRequest({
    method,
    protocol: u.protocol,
    hostname: u.hostname,
    port: Number(u.port),
    path: p,
    query,
    headers: { host: u.host, "x-amz-content-sha256": payloadHash ?? sha256Hex(body ?? ""), ...headers },
    body,
  });
  const signed = await signer.sign(req, { signingDate: signingDate ?? new Date() });
  tamper?.(signed);
  const qs = Object.entries(signed.query)
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
    .join("&");
  const { host, ...sendHeaders } = signed.headers;
  const res = await fetch(`${endpoint}${signed.path}${qs ? `?${qs}` : ""}`, { method, headers: sendHeaders, body: signed.body });
  return { status: res.status, body: Buffer.from(await res.arrayBuffer()), headers: res.headers };
}

// ---------------------------------------------------------------------------------------------------

const env = { S3_TEST_ACCESS_KEY: CREDS.accessKeyId, S3_TEST_SECRET_KEY: CREDS.secretAccessKey, S3_TEST_BUCKETS: `${BUCKET},second-bucket` };
const main = startServer("main", 0, env);
const endpoint = main.endpoint;
console.log(`# server ${endpoint} started in ${main.ms.toFixed(0)} ms (run start, node_modules already installed)`);
let c = client(endpoint);
const payload = Buffer.from("Hello from scopebox — some bytes: \u0000\u0001\u00ff and more text.\n".repeat(100));

try {
  await check("HeadBucket on the configured bucket; unknown bucket → 404", async () => {
    const r = await c.send(new s3.HeadBucketCommand({ Bucket: BUCKET }));
    eq(r.$metadata.httpStatusCode, 200, "status");
    await rejects(c.send(new s3.HeadBucketCommand({ Bucket: "no-such-bucket" })), { status: 404 }, "HeadBucket missing");
  });

  await check("PutObject (SDK defaults: real x-amz-content-sha256, CRC32 checksum) / GetObject round trip", async () => {
    const r = await c.send(new s3.PutObjectCommand({ Bucket: BUCKET, Key: "workspaces/workspaces/a.tgz", Body: payload, ContentType: "application/gzip" }));
    eq(c.sent.headers["x-amz-content-sha256"], sha256Hex(payload), "hash sent");
    assert(c.sent.headers["x-amz-checksum-crc32"], "the SDK sent no x-amz-checksum-crc32");
    eq(r.ETag, `"${crypto.createHash("md5").update(payload).digest("hex")}"`, "ETag");
    const g = await c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "workspaces/workspaces/a.tgz" }));
    eq(g.ContentType, "application/gzip", "Content-Type");
    eq(g.ContentLength, payload.length, "Content-Length");
    assert((await bodyOf(g)).equals(payload), "body differs");
  });

  await check("PutObject with x-amz-content-sha256: UNSIGNED-PAYLOAD; without Content-Type → binary/octet-stream as S3", async () => {
    const cu = client(endpoint, { before: (req) => (req.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"), requestChecksumCalculation: "WHEN_REQUIRED" });
    await cu.send(new s3.PutObjectCommand({ Bucket: BUCKET, Key: "unsigned.bin", Body: "unsigned payload" }));
    eq(cu.sent.headers["x-amz-content-sha256"], "UNSIGNED-PAYLOAD", "hash sent");
    const h = await c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "unsigned.bin" }));
    eq(h.ContentLength, 16, "size");
    eq(h.ContentType, cu.sent.headers["content-type"], "Content-Type");
    const r = await rawSigned(endpoint, { method: "PUT", path: `/${BUCKET}/no-type`, body: Buffer.from("x"), headers: { "content-length": "1" } });
    eq(r.status, 200, "raw PUT without Content-Type");
    eq((await c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "no-type" }))).ContentType, "binary/octet-stream", "default Content-Type");
  });

  await check("a correctly signed hash that is not the body's → 400 XAmzContentSHA256Mismatch", async () => {
    const cw = client(endpoint, { before: (req) => (req.headers["x-amz-content-sha256"] = sha256Hex("something else")), requestChecksumCalculation: "WHEN_REQUIRED" });
    await rejects(cw.send(new s3.PutObjectCommand({ Bucket: BUCKET, Key: "bad-hash", Body: "the body" })), { name: "XAmzContentSHA256Mismatch", status: 400 }, "PutObject");
    await rejects(c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "bad-hash" })), { status: 404 }, "object must not exist");
  });

  await check("a CRC32 checksum that is not the body's → 400 BadDigest", async () => {
    const cw = client(endpoint, { before: (req) => (req.headers["x-amz-checksum-crc32"] = "AAAAAA==") });
    await rejects(cw.send(new s3.PutObjectCommand({ Bucket: BUCKET, Key: "bad-crc", Body: "the body" })), { name: "BadDigest", status: 400 }, "PutObject");
  });

  // The storage agent's archive PUT: Content-MD5 and x-amz-checksum-sha256 of the body, its SHA-256 as metadata.
  const md5B64 = (b) => crypto.createHash("md5").update(b).digest("base64");
  const sha256B64 = (b) => crypto.createHash("sha256").update(b).digest("base64");
  const putRaw = (key, body, headers = {}) =>
    rawSigned(endpoint, { method: "PUT", path: `/${BUCKET}/${key}`, body, headers: { "content-length": String(body.length), ...headers } });

  await check("Content-MD5 and x-amz-checksum-sha256 of the body → stored; either one wrong → 400 BadDigest, the old object kept", async () => {
    const first = Buffer.from("first version of the archive");
    const second = Buffer.from("second version of the archive");
    let r = await putRaw("digests.tgz", first, { "content-md5": md5B64(first), "x-amz-checksum-sha256": sha256B64(first), "x-amz-meta-scopebox-sha256": sha256Hex(first) });
    eq(r.status, 200, "both digests right");
    eq(r.headers.get("etag"), `"${crypto.createHash("md5").update(first).digest("hex")}"`, "ETag");
    for (const [what, wrong] of [["Content-MD5", { "content-md5": md5B64(first) }], ["x-amz-checksum-sha256", { "x-amz-checksum-sha256": sha256B64(first) }]]) {
      r = await putRaw("digests.tgz", second, { "content-md5": md5B64(second), "x-amz-checksum-sha256": sha256B64(second), ...wrong });
      eq([r.status, errorCode(r.body)], [400, "BadDigest"], `wrong ${what}`);
    }
    r = await putRaw("digests.tgz", second, { "content-md5": "not base64 of 16 bytes" });
    eq([r.status, errorCode(r.body)], [400, "InvalidDigest"], "malformed Content-MD5");
    const g = await c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "digests.tgz" }));
    assert((await bodyOf(g)).equals(first), "the stored object changed");
    eq(g.Metadata, { "scopebox-sha256": sha256Hex(first) }, "metadata");
  });

  await check("test hook: POST /__test__/cut breaks a PUT mid-body → nothing stored, the old object kept; the next PUT works", async () => {
    const old = Buffer.from("the old object");
    const big = crypto.randomBytes(256 * 1024);
    eq((await putRaw("cut.tgz", old)).status, 200, "first PUT");
    eq((await fetch(`${endpoint}/__test__/cut?count=1&after=65536`, { method: "POST" })).status, 200, "hook");
    let err;
    try {
      await putRaw("cut.tgz", big, { "content-md5": md5B64(big) });
    } catch (e) {
      err = e;
    }
    assert(err, "the cut PUT succeeded");
    assert((await bodyOf(await c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "cut.tgz" })))).equals(old), "the old object changed");
    eq((await putRaw("cut.tgz", big, { "content-md5": md5B64(big) })).status, 200, "PUT after the hook was used up");
    assert((await bodyOf(await c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "cut.tgz" })))).equals(big), "the new object");
    // method=GET: the full length announced, 1000 bytes sent, the connection closed.
    eq((await fetch(`${endpoint}/__test__/cut?count=1&after=1000&method=GET`, { method: "POST" })).status, 200, "GET hook");
    let cut;
    try {
      await rawSigned(endpoint, { method: "GET", path: `/${BUCKET}/cut.tgz` });
    } catch (e) {
      cut = e;
    }
    assert(cut, "a cut GET body was read without complaint");
    const whole = await rawSigned(endpoint, { method: "GET", path: `/${BUCKET}/cut.tgz` });
    assert(whole.status === 200 && whole.body.equals(big), "the GET after the hook was used up");
  });

  await check("HeadObject: size, ETag, Content-Type, Last-Modified", async () => {
    const h = await c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "workspaces/workspaces/a.tgz" }));
    eq(h.ContentLength, payload.length, "ContentLength");
    eq(h.ContentType, "application/gzip", "ContentType");
    eq(h.ETag, `"${crypto.createHash("md5").update(payload).digest("hex")}"`, "ETag");
    assert(Math.abs(h.LastModified.getTime() - Date.now()) < 5000, `LastModified ${h.LastModified.toISOString()} is not now`);
  });

  await check("GetObject with Range → 206 and the bytes; unsatisfiable range → 416 InvalidRange", async () => {
    const g = await c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "workspaces/workspaces/a.tgz", Range: "bytes=2-5" }));
    eq(g.$metadata.httpStatusCode, 206, "status");
    eq(g.ContentRange, `bytes 2-5/${payload.length}`, "Content-Range");
    assert((await bodyOf(g)).equals(payload.subarray(2, 6)), "range body");
    const s = await c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "workspaces/workspaces/a.tgz", Range: "bytes=-3" }));
    assert((await bodyOf(s)).equals(payload.subarray(-3)), "suffix range body");
    await rejects(c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "workspaces/workspaces/a.tgz", Range: `bytes=${payload.length}-` })), { name: "InvalidRange", status: 416 }, "past the end");
  });

  await check("test hook: corrupt flips one byte of the next GET's body, not of the object", async () => {
    await c.send(new s3.PutObjectCommand({ Bucket: BUCKET, Key: "corrupt/x.tgz", Body: payload }));
    eq((await fetch(`${endpoint}/__test__/corrupt?count=1`, { method: "POST" })).status, 200, "hook");
    const bad = await bodyOf(await c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "corrupt/x.tgz" })));
    const diff = [...bad].map((b, i) => b !== payload[i]).filter(Boolean).length;
    eq([bad.length, diff], [payload.length, 1], "one byte differs");
    assert((await bodyOf(await c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "corrupt/x.tgz" })))).equals(payload), "the next GET is whole");
  });

  await check("CopyObject (AWS SDK): data, ETag and metadata copied; copy-source-if-match; missing source; copy_short quirk", async () => {
    const src = "copy/src ü+.tgz";
    const p = await c.send(new s3.PutObjectCommand({ Bucket: BUCKET, Key: src, Body: payload, ContentType: "application/gzip", Metadata: { "scopebox-sha256": "ab" } }));
    const r = await c.send(new s3.CopyObjectCommand({ Bucket: BUCKET, Key: "copy/dst.tgz", CopySource: `${BUCKET}/${encodeURIComponent(src)}`, CopySourceIfMatch: p.ETag }));
    eq(r.CopyObjectResult?.ETag, p.ETag, "result ETag");
    const h = await c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "copy/dst.tgz" }));
    eq([h.ETag, h.ContentLength, h.ContentType, h.Metadata], [p.ETag, payload.length, "application/gzip", { "scopebox-sha256": "ab" }], "copy's head");
    assert((await bodyOf(await c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "copy/dst.tgz" })))).equals(payload), "copy's body");
    await rejects(c.send(new s3.CopyObjectCommand({ Bucket: BUCKET, Key: "copy/x", CopySource: `${BUCKET}/${encodeURIComponent(src)}`, CopySourceIfMatch: '"0123"' })), { name: "PreconditionFailed", status: 412 }, "if-match");
    await rejects(c.send(new s3.CopyObjectCommand({ Bucket: BUCKET, Key: "copy/x", CopySource: `${BUCKET}/copy/none` })), { name: "NoSuchKey", status: 404 }, "missing source");
    await rejects(c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "copy/x" })), { status: 404 }, "no copy made");
    eq((await fetch(`${endpoint}/__test__/quirks?copy_short=1`, { method: "POST" })).status, 200, "quirk on");
    try {
      await c.send(new s3.CopyObjectCommand({ Bucket: BUCKET, Key: "copy/short.tgz", CopySource: `${BUCKET}/${encodeURIComponent(src)}` }));
    } finally {
      eq((await fetch(`${endpoint}/__test__/quirks?copy_short=0`, { method: "POST" })).status, 200, "quirk off");
    }
    const hs = await c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "copy/short.tgz" }));
    assert(hs.ContentLength === payload.length - 1 && hs.ETag !== p.ETag, "copy_short: one byte short, another ETag");
  });

  const oddKey = "odd/sp ace+plus~tilde!(x)*'ü/中文 ;=&?#%20.tgz";
  await check("keys that need encoding (space + ~ ! ( ) * ' ü 中文 ; = & ? # %) round trip and list", async () => {
    await c.send(new s3.PutObjectCommand({ Bucket: BUCKET, Key: oddKey, Body: "odd" }));
    assert((await bodyOf(await c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: oddKey })))).toString() === "odd", "body");
    const l = await c.send(new s3.ListObjectsV2Command({ Bucket: BUCKET, Prefix: "odd/" }));
    eq(l.Contents?.map((o) => o.Key), [oddKey], "listed keys");
    const lu = await c.send(new s3.ListObjectsV2Command({ Bucket: BUCKET, Prefix: "odd/", EncodingType: "url" }));
    eq(decodeURIComponent(lu.Contents[0].Key), oddKey, "encoding-type=url key, decoded");
  });

  const ctlKey = "ctl/a\x01b\rc\x1fd\x7fe&f.tgz";
  await check("test hook: PUT /__test__/object stores a key with control characters; listed as &#x..; or %-escapes", async () => {
    const r = await fetch(`${endpoint}/__test__/object?bucket=${BUCKET}&key=${encodeURIComponent(ctlKey)}`, { method: "PUT", body: "ctl" });
    eq(r.status, 200, "hook");
    const list = (query) => rawSigned(endpoint, { path: `/${BUCKET}`, query: { "list-type": "2", prefix: "ctl/", ...query } });
    const raw = (await list({})).body.toString("utf8");
    assert(raw.includes("<Key>ctl/a&#x1;b&#xD;c&#x1F;d&#x7F;e&amp;f.tgz</Key>"), `numeric references in ${raw}`);
    const lu = await c.send(new s3.ListObjectsV2Command({ Bucket: BUCKET, Prefix: "ctl/", EncodingType: "url" }));
    eq(lu.Contents.map((o) => decodeURIComponent(o.Key)), [ctlKey], "encoding-type=url key, decoded");
    eq(lu.EncodingType, "url", "EncodingType");
    assert((await bodyOf(await c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: ctlKey })))).toString() === "ctl", "body");
    // The quirk of servers that take encoding-type and send plain keys anyway.
    eq((await fetch(`${endpoint}/__test__/quirks?ignore_encoding_type=1`, { method: "POST" })).status, 200, "quirk on");
    const plain = (await list({ "encoding-type": "url" })).body.toString("utf8");
    assert(plain.includes("&#x1;") && !plain.includes("<EncodingType>"), `plain keys in ${plain}`);
    eq((await fetch(`${endpoint}/__test__/quirks?ignore_encoding_type=0`, { method: "POST" })).status, 200, "quirk off");
    await c.send(new s3.DeleteObjectCommand({ Bucket: BUCKET, Key: ctlKey }));
  });

  const many = Array.from({ length: 1500 }, (_, i) => `many/obj-${String(i).padStart(5, "0")}`);
  await check("1500 PutObjects", async () => {
    for (let i = 0; i < many.length; i += 100)
      await Promise.all(many.slice(i, i + 100).map((Key) => c.send(new s3.PutObjectCommand({ Bucket: BUCKET, Key, Body: Key }))));
  });

  await check("ListObjectsV2 paginates: default 1000 per page → pages of 1000 and 500, keys in order", async () => {
    const p1 = await c.send(new s3.ListObjectsV2Command({ Bucket: BUCKET, Prefix: "many/" }));
    eq([p1.KeyCount, p1.IsTruncated, p1.MaxKeys], [1000, true, 1000], "page 1 KeyCount/IsTruncated/MaxKeys");
    assert(p1.NextContinuationToken, "no NextContinuationToken");
    const p2 = await c.send(new s3.ListObjectsV2Command({ Bucket: BUCKET, Prefix: "many/", ContinuationToken: p1.NextContinuationToken }));
    eq([p2.KeyCount, p2.IsTruncated, p2.NextContinuationToken], [500, false, undefined], "page 2");
    eq([...p1.Contents, ...p2.Contents].map((o) => o.Key), many, "keys");
    const o = p2.Contents.at(-1);
    assert(o.LastModified instanceof Date && Math.abs(o.LastModified - Date.now()) < 60000, "LastModified");
    eq([o.Size, o.ETag], [many.at(-1).length, `"${crypto.createHash("md5").update(many.at(-1)).digest("hex")}"`], "Size/ETag");
  });

  await check("ListObjectsV2 max-keys 400 → 400+400+400+300; max-keys 5000 is capped at 1000; paginator", async () => {
    const sizes = [];
    let token;
    do {
      const p = await c.send(new s3.ListObjectsV2Command({ Bucket: BUCKET, Prefix: "many/", MaxKeys: 400, ContinuationToken: token }));
      sizes.push(p.KeyCount);
      token = p.NextContinuationToken;
    } while (token);
    eq(sizes, [400, 400, 400, 300], "page sizes");
    const big = await c.send(new s3.ListObjectsV2Command({ Bucket: BUCKET, Prefix: "many/", MaxKeys: 5000 }));
    eq([big.KeyCount, big.IsTruncated], [1000, true], "capped page");
    let total = 0;
    for await (const page of s3.paginateListObjectsV2({ client: c, pageSize: 700 }, { Bucket: BUCKET, Prefix: "many/" })) total += page.KeyCount;
    eq(total, 1500, "paginator total");
    const sa = await c.send(new s3.ListObjectsV2Command({ Bucket: BUCKET, Prefix: "many/", StartAfter: many[1497] }));
    eq(sa.Contents.map((x) => x.Key), many.slice(1498), "StartAfter");
  });

  await check("ListObjectsV2 with a delimiter: CommonPrefixes, paginated one entry at a time", async () => {
    for (const Key of ["tree/a/1", "tree/a/2", "tree/b/1", "tree/c"]) await c.send(new s3.PutObjectCommand({ Bucket: BUCKET, Key, Body: "x" }));
    const seen = [];
    let token;
    do {
      const p = await c.send(new s3.ListObjectsV2Command({ Bucket: BUCKET, Prefix: "tree/", Delimiter: "/", MaxKeys: 1, ContinuationToken: token }));
      for (const cp of p.CommonPrefixes ?? []) seen.push(`prefix:${cp.Prefix}`);
      for (const o of p.Contents ?? []) seen.push(`key:${o.Key}`);
      token = p.NextContinuationToken;
    } while (token);
    eq(seen, ["prefix:tree/a/", "prefix:tree/b/", "key:tree/c"], "entries");
  });

  await check("test hook: POST /__test__/age sets LastModified in the past (list and HEAD agree)", async () => {
    const r = await fetch(`${endpoint}/__test__/age?bucket=${BUCKET}&key=${encodeURIComponent("tree/c")}&seconds=7200`, { method: "POST" });
    eq(r.status, 200, "hook status");
    const l = await c.send(new s3.ListObjectsV2Command({ Bucket: BUCKET, Prefix: "tree/c" }));
    const age = Date.now() - l.Contents[0].LastModified.getTime();
    assert(age >= 7200e3 && age < 7200e3 + 5000, `list LastModified is ${age} ms old`);
    const h = await c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "tree/c" }));
    eq(h.LastModified.getTime(), l.Contents[0].LastModified.getTime(), "HEAD Last-Modified");
    const p = await fetch(`${endpoint}/__test__/age?bucket=${BUCKET}&prefix=tree/a/&at=2020-01-02T03:04:05Z`, { method: "POST" });
    eq((await p.json()).keys, ["tree/a/1", "tree/a/2"], "aged by prefix");
    const la = await c.send(new s3.ListObjectsV2Command({ Bucket: BUCKET, Prefix: "tree/a/" }));
    eq(la.Contents.map((o) => o.LastModified.toISOString()), ["2020-01-02T03:04:05.000Z", "2020-01-02T03:04:05.000Z"], "at=");
  });

  await check("DeleteObjects: 1000 keys + a missing one in one request; the rest with DeleteObject", async () => {
    const r = await c.send(new s3.DeleteObjectsCommand({ Bucket: BUCKET, Delete: { Objects: [...many.slice(0, 999), "many/never-existed"].map((Key) => ({ Key })) } }));
    eq([r.Deleted.length, r.Errors?.length ?? 0], [1000, 0], "Deleted/Errors");
    const q = await c.send(new s3.DeleteObjectsCommand({ Bucket: BUCKET, Delete: { Objects: [{ Key: many[999] }], Quiet: true } }));
    eq(q.Deleted?.length ?? 0, 0, "quiet mode lists nothing");
    await Promise.all(many.slice(1000).map((Key) => c.send(new s3.DeleteObjectCommand({ Bucket: BUCKET, Key }))));
    const l = await c.send(new s3.ListObjectsV2Command({ Bucket: BUCKET, Prefix: "many/" }));
    eq([l.KeyCount, l.Contents], [0, undefined], "left after delete");
  });

  await check("missing key: DeleteObject → 204, GetObject → 404 NoSuchKey, HeadObject → 404", async () => {
    const d = await c.send(new s3.DeleteObjectCommand({ Bucket: BUCKET, Key: "no/such/key" }));
    eq(d.$metadata.httpStatusCode, 204, "DeleteObject status");
    await rejects(c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "no/such/key" })), { name: "NoSuchKey", status: 404 }, "GetObject");
    await rejects(c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "no/such/key" })), { name: "NotFound", status: 404 }, "HeadObject");
    await rejects(c.send(new s3.GetObjectCommand({ Bucket: "no-such-bucket", Key: "k" })), { name: "NoSuchBucket", status: 404 }, "GetObject, no bucket");
  });

  await check("wrong secret → 403 SignatureDoesNotMatch (GET, PUT, LIST, DELETE); nothing written or deleted", async () => {
    const bad = client(endpoint, { credentials: { ...CREDS, secretAccessKey: `${CREDS.secretAccessKey}x` } });
    const e = await rejects(bad.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "workspaces/workspaces/a.tgz" })), { name: "SignatureDoesNotMatch", status: 403 }, "GetObject");
    assert(/^GET\n\/scopebox-test\/workspaces\/workspaces\/a\.tgz\n/.test(e.CanonicalRequest ?? ""), `error body lacks the CanonicalRequest: ${JSON.stringify(e.CanonicalRequest)}`);
    await rejects(bad.send(new s3.PutObjectCommand({ Bucket: BUCKET, Key: "evil", Body: "x" })), { name: "SignatureDoesNotMatch", status: 403 }, "PutObject");
    await rejects(bad.send(new s3.ListObjectsV2Command({ Bucket: BUCKET })), { name: "SignatureDoesNotMatch", status: 403 }, "ListObjectsV2");
    await rejects(bad.send(new s3.DeleteObjectCommand({ Bucket: BUCKET, Key: "unsigned.bin" })), { name: "SignatureDoesNotMatch", status: 403 }, "DeleteObject");
    await rejects(c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "evil" })), { status: 404 }, "evil must not exist");
    await c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "unsigned.bin" }));
  });

  await check("unknown access key → 403 InvalidAccessKeyId; wrong region → 400 AuthorizationHeaderMalformed; no auth → 403 AccessDenied", async () => {
    const other = client(endpoint, { credentials: { ...CREDS, accessKeyId: "AKIDOTHER" } });
    await rejects(other.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "unsigned.bin" })), { name: "InvalidAccessKeyId", status: 403 }, "access key");
    const eu = client(endpoint, { region: "eu-west-1" });
    await rejects(eu.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "unsigned.bin" })), { name: "AuthorizationHeaderMalformed", status: 400 }, "region");
    const r = curl(`${endpoint}/${BUCKET}/unsigned.bin`);
    eq([r.status, errorCode(r.body)], [403, "AccessDenied"], "anonymous curl");
  });

  await check("raw @smithy/signature-v4 requests (the agent's shapes): UNSIGNED-PAYLOAD and real hashes", async () => {
    const body = Buffer.from("raw body bytes");
    let r = await rawSigned(endpoint, { method: "PUT", path: `/${BUCKET}/raw/one.bin`, body, headers: { "content-type": "application/x-test", "content-length": String(body.length) } });
    eq(r.status, 200, `PUT real hash (${r.body})`);
    r = await rawSigned(endpoint, { method: "PUT", path: `/${BUCKET}/raw/two.bin`, body, payloadHash: "UNSIGNED-PAYLOAD", headers: { "content-length": String(body.length) } });
    eq(r.status, 200, `PUT UNSIGNED-PAYLOAD (${r.body})`);
    r = await rawSigned(endpoint, { path: `/${BUCKET}/raw/one.bin`, payloadHash: "UNSIGNED-PAYLOAD" });
    eq([r.status, r.body.toString(), r.headers.get("content-type")], [200, body.toString(), "application/x-test"], "GET UNSIGNED-PAYLOAD");
    r = await rawSigned(endpoint, { path: `/${BUCKET}`, query: { "list-type": "2", prefix: "raw/", "max-keys": "1" } });
    eq(r.status, 200, "LIST empty-body hash");
    assert(/<IsTruncated>true<\/IsTruncated>/.test(r.body) && /<NextContinuationToken>/.test(r.body), "LIST truncated");
    const token = /<NextContinuationToken>([^<]*)</.exec(r.body)[1];
    r = await rawSigned(endpoint, { path: `/${BUCKET}`, query: { "list-type": "2", prefix: "raw/", "max-keys": "1", "continuation-token": token } });
    assert(r.status === 200 && /<Key>raw\/two.bin<\/Key>/.test(r.body) && /<IsTruncated>false</.test(r.body), `LIST page 2: ${r.body}`);
    r = await rawSigned(endpoint, { method: "DELETE", path: `/${BUCKET}/raw/two.bin` });
    eq(r.status, 204, "DELETE");
  });

  await check("raw requests altered after signing → refused (body, signed header, query, path, unsigned x-amz-*, skew)", async () => {
    const body = Buffer.from("original body!");
    const put = { method: "PUT", path: `/${BUCKET}/raw/tampered`, body, headers: { "content-type": "text/plain", "content-length": String(body.length) } };
    let r = await rawSigned(endpoint, { ...put, tamper: (s) => (s.body = Buffer.from("modified body!")) });
    eq([r.status, errorCode(r.body)], [400, "XAmzContentSHA256Mismatch"], "body changed");
    r = await rawSigned(endpoint, { ...put, payloadHash: "UNSIGNED-PAYLOAD", tamper: (s) => (s.headers["content-type"] = "text/html") });
    eq([r.status, errorCode(r.body)], [403, "SignatureDoesNotMatch"], "signed header changed");
    r = await rawSigned(endpoint, { path: `/${BUCKET}`, query: { "list-type": "2", prefix: "raw/" }, tamper: (s) => (s.query.prefix = "") });
    eq([r.status, errorCode(r.body)], [403, "SignatureDoesNotMatch"], "query changed");
    r = await rawSigned(endpoint, { path: `/${BUCKET}/raw/one.bin`, tamper: (s) => (s.path = `/${BUCKET}/raw/one.bi%6E`) });
    eq(r.status, 200, "same path, other percent-encoding: canonicalized like S3");
    r = await rawSigned(endpoint, { path: `/${BUCKET}/raw/one.bin`, tamper: (s) => (s.path = `/${BUCKET}/raw/one.bim`) });
    eq([r.status, errorCode(r.body)], [403, "SignatureDoesNotMatch"], "path changed");
    r = await rawSigned(endpoint, { path: `/${BUCKET}/raw/one.bin`, tamper: (s) => (s.headers["x-amz-meta-extra"] = "1") });
    eq([r.status, errorCode(r.body)], [403, "AccessDenied"], "unsigned x-amz-meta header");
    assert(/HeadersNotSigned/.test(r.body), "HeadersNotSigned");
    r = await rawSigned(endpoint, { path: `/${BUCKET}/raw/one.bin`, signingDate: new Date(Date.now() - 3600e3) });
    eq([r.status, errorCode(r.body)], [403, "RequestTimeTooSkewed"], "an hour old");
    r = await rawSigned(endpoint, { path: `/${BUCKET}/raw/one.bin`, tamper: (s) => delete s.headers["x-amz-content-sha256"] });
    eq(r.status, 400, "no x-amz-content-sha256");
  });

  await check("presigned GET (s3-request-presigner) works with plain curl; URL shape as the SDK makes it", async () => {
    const url = await getSignedUrl(c, new s3.GetObjectCommand({ Bucket: BUCKET, Key: "workspaces/workspaces/a.tgz" }), { expiresIn: 600 });
    const q = new URL(url).searchParams;
    eq([q.get("X-Amz-Content-Sha256"), q.get("X-Amz-SignedHeaders"), q.get("x-id"), q.get("X-Amz-Expires")], ["UNSIGNED-PAYLOAD", "host", "GetObject", "600"], "query");
    const r = curl(url);
    eq([r.status, r.headers["content-type"]], [200, "application/gzip"], "curl status/type");
    assert(r.body.equals(payload), "curl body");
    const odd = curl(await getSignedUrl(c, new s3.GetObjectCommand({ Bucket: BUCKET, Key: oddKey }), { expiresIn: 600 }));
    eq([odd.status, odd.body.toString()], [200, "odd"], "odd key");
    const ranged = curl(url, { headers: { Range: "bytes=0-3" } });
    eq([ranged.status, ranged.body.toString()], [206, payload.subarray(0, 4).toString()], "unsigned Range header");
  });

  await check("presigned URL with one signature character altered → 403 SignatureDoesNotMatch; other alterations too", async () => {
    const url = await getSignedUrl(c, new s3.GetObjectCommand({ Bucket: BUCKET, Key: "workspaces/workspaces/a.tgz" }), { expiresIn: 600 });
    const altered = url.replace(/(X-Amz-Signature=[0-9a-f]{10})([0-9a-f])/, (_, a, ch) => a + (ch === "0" ? "1" : "0"));
    assert(altered !== url, "could not alter");
    let r = curl(altered);
    eq([r.status, errorCode(r.body)], [403, "SignatureDoesNotMatch"], "altered signature");
    r = curl(url.replace("/a.tgz?", "/b.tgz?"));
    eq([r.status, errorCode(r.body)], [403, "SignatureDoesNotMatch"], "other key");
    r = curl(url.replace("X-Amz-Expires=600", "X-Amz-Expires=6000"));
    eq([r.status, errorCode(r.body)], [403, "SignatureDoesNotMatch"], "longer expiry");
    r = curl(url, { method: "DELETE" });
    eq([r.status, errorCode(r.body)], [403, "SignatureDoesNotMatch"], "other method");
    r = curl(`${url}&response-content-type=text/html`);
    eq([r.status, errorCode(r.body)], [403, "SignatureDoesNotMatch"], "extra parameter");
    r = curl(url.replace(/&?X-Amz-Content-Sha256=UNSIGNED-PAYLOAD/, ""));
    eq([r.status, errorCode(r.body)], [403, "SignatureDoesNotMatch"], "X-Amz-Content-Sha256 removed");
  });

  await check("presigned GET in the S3 documentation's shape (no X-Amz-Content-Sha256, UNSIGNED-PAYLOAD signed) works with curl", async () => {
    const u = new URL(endpoint);
    const signer = new SignatureV4({ credentials: CREDS, region: REGION, service: "s3", sha256: Hash.bind(null, "sha256"), uriEscapePath: false });
    const only = new Set(["x-amz-content-sha256"]);
    const p = await signer.presign(
      new HttpRequest({ method: "GET", protocol: "http:", hostname: u.hostname, port: Number(u.port), path: `/${BUCKET}/workspaces/workspaces/a.tgz`, headers: { host: u.host, "x-amz-content-sha256": "UNSIGNED-PAYLOAD" } }),
      { expiresIn: 60, unhoistableHeaders: only, unsignableHeaders: only },
    );
    const qs = Object.entries(p.query).map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join("&");
    assert(!/Content-Sha256/i.test(qs), `query has a payload hash: ${qs}`);
    const r = curl(`${endpoint}${p.path}?${qs}`);
    eq(r.status, 200, `curl (${r.body.subarray(0, 300)})`);
    assert(r.body.equals(payload), "body");
  });

  await check("expired presigned URL (X-Amz-Expires=1, 2 s later) → 403 AccessDenied 'Request has expired'", async () => {
    const url = await getSignedUrl(c, new s3.GetObjectCommand({ Bucket: BUCKET, Key: "workspaces/workspaces/a.tgz" }), { expiresIn: 1 });
    assert(/X-Amz-Expires=1&/.test(url), "X-Amz-Expires=1");
    await sleep(2000);
    const r = curl(url);
    eq([r.status, errorCode(r.body)], [403, "AccessDenied"], "status/code");
    assert(/<Message>Request has expired<\/Message>/.test(r.body), `message: ${r.body}`);
  });

  await check("presigned PUT with curl (3 MiB, Expect: 100-continue); Content-Type signed on request: another type or a bad signature → 403", async () => {
    const big = crypto.randomBytes(3 << 20);
    const file = path.join(tmp, "big.bin");
    fs.writeFileSync(file, big);
    const plain = await getSignedUrl(c, new s3.PutObjectCommand({ Bucket: BUCKET, Key: "mineru/plain.bin", ContentType: "application/pdf" }), { expiresIn: 600 });
    eq(new URL(plain).searchParams.get("X-Amz-SignedHeaders"), "host", "SDK default SignedHeaders");
    let p = curl(plain, { method: "PUT", data: "abc", headers: { "Content-Type": "text/plain" } });
    eq(p.status, 200, "host-only presigned PUT, any Content-Type (as S3)");
    eq((await c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "mineru/plain.bin" }))).ContentType, "text/plain", "stored type is the one sent");
    const url = await getSignedUrl(c, new s3.PutObjectCommand({ Bucket: BUCKET, Key: "mineru/big.bin", ContentType: "application/pdf" }), { expiresIn: 600, signableHeaders: new Set(["content-type"]) });
    eq(new URL(url).searchParams.get("X-Amz-SignedHeaders"), "content-type;host", "SignedHeaders");
    let r = curl(url, { method: "PUT", dataFile: file, headers: { "Content-Type": "text/plain", Expect: "100-continue" } });
    eq([r.status, errorCode(r.body)], [403, "SignatureDoesNotMatch"], "other Content-Type");
    r = curl(url.replace(/X-Amz-Signature=./, "X-Amz-Signature=x"), { method: "PUT", dataFile: file, headers: { "Content-Type": "application/pdf", Expect: "100-continue" } });
    eq(r.status, 403, "bad signature");
    r = curl(url, { method: "PUT", dataFile: file, headers: { "Content-Type": "application/pdf", Expect: "100-continue" } });
    eq(r.status, 200, `upload (${r.body})`);
    const g = await c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "mineru/big.bin" }));
    eq(g.ContentType, "application/pdf", "stored Content-Type");
    assert((await bodyOf(g)).equals(big), "stored body");
  });

  await check("test hook: POST /__test__/fail injects 503 SlowDown; the SDK's retries get through", async () => {
    let r = await fetch(`${endpoint}/__test__/fail?count=2&status=503`, { method: "POST" });
    eq(r.status, 200, "hook");
    await fetch(`${endpoint}/__test__/log`, { method: "DELETE" });
    const cr = client(endpoint, { maxAttempts: 3 });
    await cr.send(new s3.PutObjectCommand({ Bucket: BUCKET, Key: "retry.bin", Body: "retry" }));
    const log = await (await fetch(`${endpoint}/__test__/log`)).json();
    eq(log.map((e) => `${e.method} ${e.status} ${e.code ?? ""}`.trim()), ["PUT 503 SlowDown", "PUT 503 SlowDown", "PUT 200"], "request log");
    r = await fetch(`${endpoint}/__test__/fail?count=1&status=500`, { method: "POST" });
    await rejects(c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "retry.bin" })), { status: 500 }, "one attempt, 500");
  });

  await check("outage: run stop → connection refused; run start on the same DATA_DIR and port → objects still there", async () => {
    const port = new URL(endpoint).port;
    run("stop", main.dir);
    // A fresh client: the old one's kept-alive connections died with the server.
    const fresh = client(endpoint);
    const e = await rejects(fresh.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "retry.bin" })), {}, "while stopped");
    eq(e.code, "ECONNREFUSED", "error while stopped");
    const again = startServer("main", port, env);
    eq(again.endpoint, endpoint, "endpoint");
    c = fresh;
    const g = await c.send(new s3.GetObjectCommand({ Bucket: BUCKET, Key: "workspaces/workspaces/a.tgz" }));
    assert((await bodyOf(g)).equals(payload), "body after restart");
    const l = await c.send(new s3.ListObjectsV2Command({ Bucket: BUCKET, Prefix: "tree/a/" }));
    eq(l.Contents.map((o) => o.LastModified.toISOString()), ["2020-01-02T03:04:05.000Z", "2020-01-02T03:04:05.000Z"], "aged times survive");
  });

  await check("run pause → requests hang (timeout); run resume → answered", async () => {
    run("pause", main.dir);
    try {
      await rejects(c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "retry.bin" }), { abortSignal: AbortSignal.timeout(1000) }), { name: "AbortError" }, "while paused");
    } finally {
      run("resume", main.dir);
    }
    await c.send(new s3.HeadObjectCommand({ Bucket: BUCKET, Key: "retry.bin" }));
  });

  // The examples of the S3 documentation ("Signature Calculations for the Authorization Header:
  // Transferring Payload in a Single Chunk" and "Authenticating Requests: Using Query Parameters"),
  // sent as printed there to a server with their credentials and clock. Path-style routing then
  // answers 404 NoSuchBucket for "/test.txt", 400 InvalidBucketName for "/test$file.text" or 200
  // ListBuckets for "/": all past authentication, which refuses with 403.
  await check("the S3 documentation's signed examples verify (GET Range, PUT with Date, ?lifecycle, ?max-keys&prefix, presigned)", async () => {
    const doc = startServer("awsdoc", 0, {
      S3_TEST_ACCESS_KEY: "AKIAIOSFODNN7EXAMPLE",
      S3_TEST_SECRET_KEY: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
      S3_TEST_NOW: "2013-05-24T00:00:00Z",
      S3_TEST_BUCKETS: "examplebucket",
    }).endpoint;
    const host = "examplebucket.s3.amazonaws.com";
    const auth = (signed, sig) => `AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=${signed},Signature=${sig}`;
    const common = { Host: host, "x-amz-date": "20130524T000000Z" };
    const E = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    const cases = [
      ["GET object", "GET", "/test.txt", { ...common, Range: "bytes=0-9", "x-amz-content-sha256": E, Authorization: auth("host;range;x-amz-content-sha256;x-amz-date", "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41") }, undefined, 404],
      // Routed as a bucket-level PUT (CreateBucket "test$file.text") once authenticated.
      ["PUT object", "PUT", "/test%24file.text", { ...common, Date: "Fri, 24 May 2013 00:00:00 GMT", "x-amz-storage-class": "REDUCED_REDUNDANCY", "x-amz-content-sha256": "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072", "Content-Type": "", Authorization: auth("date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class", "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd") }, "Welcome to Amazon S3.", 400],
      ["GET ?lifecycle", "GET", "/?lifecycle", { ...common, "x-amz-content-sha256": E, Authorization: auth("host;x-amz-content-sha256;x-amz-date", "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543") }, undefined, 200],
      ["GET ?max-keys=2&prefix=J", "GET", "/?max-keys=2&prefix=J", { ...common, "x-amz-content-sha256": E, Authorization: auth("host;x-amz-content-sha256;x-amz-date", "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7") }, undefined, 200],
      ["presigned GET", "GET", "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404", { Host: host }, undefined, 404],
    ];
    for (const [name, method, p, headers, data, want] of cases) {
      const r = curl(`${doc}${p}`, { method, headers, data });
      eq(r.status, want, `${name} (${errorCode(r.body)})`);
      // The same with the last signature digit changed must be refused.
      const flip = (s) => s.replace(/(Signature=[0-9a-f]{63})([0-9a-f])/, (_, a, d) => a + (d === "0" ? "1" : "0"));
      const bad = headers.Authorization ? curl(`${doc}${p}`, { method, headers: { ...headers, Authorization: flip(headers.Authorization) }, data }) : curl(`${doc}${flip(p)}`, { method, headers, data });
      eq([bad.status, errorCode(bad.body)], [403, "SignatureDoesNotMatch"], `${name}, altered`);
    }
  });

  await check("server log names the canonical request of refused signatures", async () => {
    const log = fs.readFileSync(path.join(main.dir, "s3server.log"), "utf8");
    assert(/SignatureDoesNotMatch[^\n]*\n  canonical request:\n    GET\n/.test(log), "no canonical request in s3server.log");
  });
} finally {
  cleanup();
}

console.log(`1..${n}`);
console.log(failed ? `# FAILED ${failed} of ${n}` : `# all ${n} passed`);
process.exit(failed ? 1 : 0);
