#!/usr/bin/env node
// SPDX-License-Identifier: LGPL-2.1-or-later
// Self-test of the Aliyun OSS mode of the test server ("run start-oss"): the official OSS SDK, ali-oss, in
// both addressings it can use against a local endpoint, curl with ali-oss's signed URLs, and requests
// signed by an independent V1 implementation here (the shape src/storage-agent sends: path-style, Date).
// Usage: node selftest-oss.mjs   (or ./run selftest-oss). Prints TAP; exit status 1 when a check fails.
import { spawnSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

const OSS = (await import("ali-oss")).default;

const here = path.dirname(new URL(import.meta.url).pathname);
const RUN = path.join(here, "run");
const BUCKET = "scopebox-test";
// The server's defaults: the test starts it without OSS_TEST_* so that the defaults are what is checked.
const CREDS = { accessKeyId: "LTAIscopeboxTEST", accessKeySecret: "ScopeboxOssTestSecret0123456789" };

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

// ali-oss errors carry status and code (the <Code> of the body).
async function rejects(promise, { code, status }, what) {
  try {
    await promise;
  } catch (e) {
    if (status !== undefined && e.status !== status) throw new Error(`${what}: HTTP ${e.status} ${e.code} (${e.message}), expected ${status}`);
    if (code !== undefined && e.code !== code) throw new Error(`${what}: error ${e.code} (${e.message}), expected ${code}`);
    return e;
  }
  throw new Error(`${what}: succeeded, expected ${code ?? status}`);
}

// ---------------------------------------------------------------------------------------------------
// Server, clients, curl

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "s3server-selftest-oss-"));
const dir = path.join(tmp, "oss");

function run(...args) {
  const r = spawnSync(RUN, args, { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`run ${args.join(" ")}: ${r.stderr}`);
  return r.stdout.trim();
}

function curl(url, { method = "GET", headers = {}, data, timeout = 10 } = {}) {
  const args = ["-sS", "-g", "--max-time", String(timeout), "-X", method, "-D", "-", "-o", "-"];
  for (const [k, v] of Object.entries(headers)) args.push("-H", v === "" ? `${k};` : `${k}: ${v}`); // "K;": empty value
  if (data !== undefined) args.push("--data-binary", "@-");
  args.push(url);
  const r = spawnSync("curl", args, { input: data, maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`curl ${url}: exit ${r.status} ${r.stderr}`);
  const out = r.stdout;
  let start = 0;
  let status;
  let end;
  for (;;) {
    end = out.indexOf("\r\n\r\n", start);
    status = Number(/^HTTP\/[\d.]+ (\d{3})/.exec(out.subarray(start, end).toString("latin1"))[1]);
    if (status !== 100) break;
    start = end + 4;
  }
  const h = {};
  for (const line of out.subarray(start, end).toString("latin1").split("\r\n").slice(1)) {
    const i = line.indexOf(":");
    h[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
  }
  return { status, headers: h, body: out.subarray(end + 4) };
}

const tag = (body, name) => new RegExp(`<${name}>([^<]*)</${name}>`).exec(body.toString("utf8"))?.[1];
const md5 = (data) => crypto.createHash("md5").update(data);

const endpoint = run("start-oss", "0", dir);
const port = new URL(endpoint).port;
console.log(`# OSS-mode server ${endpoint}`);

// Path-style: a non-IP endpoint with sldEnable puts the bucket in the path (ali-oss refuses signatureUrl
// for an IP endpoint). Virtual-hosted: for an IP endpoint ali-oss connects to the IP, path /<key>, with
// "Host: <bucket>.oss-cn-hangzhou.aliyuncs.com" (from its region).
function pathClient(extra = {}) {
  return new OSS({ ...CREDS, endpoint: `http://localhost:${port}`, bucket: BUCKET, cname: false, sldEnable: true, retryMax: 0, ...extra });
}
function vhostClient(extra = {}) {
  return new OSS({ ...CREDS, endpoint, bucket: BUCKET, cname: false, retryMax: 0, ...extra });
}

// An independent OSS V1 signer, written from the documentation (not ali-oss): what the storage agent sends.
// path: "/<bucket>/<key>" (raw, encoded here); query: [[name, value], …] all sent; signed: the names that go
// into the CanonicalizedResource.
function rawRequest({ method = "GET", key = "", query = [], signed = [], headers = {}, body, secret = CREDS.accessKeySecret, date = new Date(), tamper }) {
  const h = { Date: date.toUTCString(), ...headers };
  if (body !== undefined) {
    h["Content-MD5"] ??= md5(body).digest("base64");
    h["Content-Type"] ??= ""; // curl would send (unsigned) application/x-www-form-urlencoded
  }
  const lower = Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), String(v)]));
  const ossHeaders = Object.keys(lower).filter((k) => k.startsWith("x-oss-")).sort().map((k) => `${k}:${lower[k].trim()}\n`).join("");
  const sub = query.filter(([k]) => signed.includes(k)).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([k, v]) => (v === "" ? k : `${k}=${v}`));
  const resource = `/${BUCKET}/${key}${sub.length ? `?${sub.join("&")}` : ""}`;
  const sts = `${method}\n${lower["content-md5"] ?? ""}\n${lower["content-type"] ?? ""}\n${lower["x-oss-date"] ?? lower.date}\n${ossHeaders}${resource}`;
  const sig = crypto.createHmac("sha1", secret).update(sts, "utf8").digest("base64");
  h.Authorization = `OSS ${CREDS.accessKeyId}:${sig}`;
  const enc = (s) => encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  const req = { method, path: `/${BUCKET}/${key.split("/").map(enc).join("/")}`, query: [...query], headers: h, body };
  tamper?.(req);
  const qs = req.query.map(([k, v]) => (v === "" ? enc(k) : `${enc(k)}=${enc(v)}`)).join("&");
  return curl(`${endpoint}${req.path}${qs ? `?${qs}` : ""}`, { method: req.method, headers: req.headers, data: req.body });
}

const payload = Buffer.from("Hello from scopebox over OSS — bytes \u0000\u0001\u00ff.\n".repeat(100));
const c = pathClient();

try {
  await check("run start-oss: health reports the OSS provider and the default access key", async () => {
    const h = await (await fetch(`${endpoint}/__test__/health`)).json();
    eq([h.provider, h.access_key, h.buckets], ["oss", CREDS.accessKeyId, [BUCKET]], "health");
  });

  await check("ali-oss, path-style (localhost endpoint, sldEnable): put / get / head with metadata, upper-case MD5 ETag", async () => {
    const p = await c.put("workspaces/a.tgz", payload, { mime: "application/gzip", meta: { origin: "selftest" } });
    eq(p.res.status, 200, "put status");
    const etag = `"${md5(payload).digest("hex").toUpperCase()}"`;
    eq(p.res.headers.etag, etag, "put ETag");
    const g = await c.get("workspaces/a.tgz");
    assert(g.content.equals(payload), "body differs");
    eq([g.res.headers["content-type"], g.res.headers["x-oss-meta-origin"]], ["application/gzip", "selftest"], "get headers");
    const hd = await c.head("workspaces/a.tgz");
    eq([hd.status, hd.meta, hd.res.headers["content-length"], hd.res.headers.etag], [200, { origin: "selftest" }, String(payload.length), etag], "head");
    const r = await c.get("workspaces/a.tgz", { headers: { Range: "bytes=2-5" } });
    eq([r.res.status, r.content.toString("latin1")], [206, payload.subarray(2, 6).toString("latin1")], "range");
  });

  await check("ali-oss, virtual-hosted (127.0.0.1 endpoint, Host: <bucket>.oss-cn-hangzhou.aliyuncs.com): put / get / list / delete", async () => {
    const v = vhostClient();
    await fetch(`${endpoint}/__test__/log`, { method: "DELETE" });
    await v.put("vhost/x.txt", Buffer.from("via Host header"));
    eq((await v.get("vhost/x.txt")).content.toString(), "via Host header", "get");
    eq((await v.listV2({ prefix: "vhost/" })).objects.map((o) => o.name), ["vhost/x.txt"], "list");
    eq((await c.get("vhost/x.txt")).content.toString(), "via Host header", "same object path-style");
    eq((await v.delete("vhost/x.txt")).res.status, 204, "delete");
    const log = await (await fetch(`${endpoint}/__test__/log`)).json();
    eq(log[0].url, "/vhost/x.txt", "request path has no bucket");
  });

  await check("ali-oss copy: data, ETag and metadata copied; x-oss-forbid-overwrite; copy-source-if-match", async () => {
    const p = await c.put("copy/src.tgz", payload, { meta: { origin: "copied" } });
    const r = await c.copy("copy/dst.tgz", "copy/src.tgz", { headers: { "x-oss-copy-source-if-match": p.res.headers.etag } });
    eq(r.res.status, 200, "copy status");
    const hd = await c.head("copy/dst.tgz");
    eq([hd.res.headers.etag, hd.res.headers["content-length"], hd.meta], [p.res.headers.etag, String(payload.length), { origin: "copied" }], "copy's head");
    await rejects(c.copy("copy/dst.tgz", "copy/src.tgz", { headers: { "x-oss-forbid-overwrite": "true" } }), { code: "FileAlreadyExists", status: 409 }, "forbid-overwrite");
    await rejects(c.copy("copy/x.tgz", "copy/src.tgz", { headers: { "x-oss-copy-source-if-match": '"0123"' } }), { code: "PreconditionFailed", status: 412 }, "if-match");
  });

  const oddKey = "odd/sp ace+plus~tilde!(x)*'ü/中文 ;=&#%20.tgz";
  await check("keys that need encoding round trip and list", async () => {
    await c.put(oddKey, Buffer.from("odd"));
    eq((await c.get(oddKey)).content.toString(), "odd", "body");
    eq((await c.listV2({ prefix: "odd/" })).objects.map((o) => o.name), [oddKey], "listed");
  });

  const many = Array.from({ length: 1500 }, (_, i) => `many/obj-${String(i).padStart(5, "0")}`);
  await check("1500 puts (ali-oss)", async () => {
    for (let i = 0; i < many.length; i += 100) await Promise.all(many.slice(i, i + 100).map((k) => c.put(k, Buffer.from(k))));
  });

  await check("listV2 paginates with a signed continuation-token: 1000 + 500; max-keys 400 → 400+400+400+300", async () => {
    const p1 = await c.listV2({ prefix: "many/", "max-keys": 1000 });
    eq([p1.keyCount, p1.isTruncated, p1.objects.length], [1000, true, 1000], "page 1");
    assert(/[+/=]/.test(p1.nextContinuationToken), `token ${p1.nextContinuationToken} has no + / = (encoding not exercised)`);
    const p2 = await c.listV2({ prefix: "many/", "max-keys": 1000, "continuation-token": p1.nextContinuationToken });
    eq([p2.keyCount, p2.isTruncated, p2.nextContinuationToken], [500, false, null], "page 2");
    eq([...p1.objects, ...p2.objects].map((o) => o.name), many, "keys in order");
    const last = p2.objects.at(-1);
    eq([last.size, last.etag, last.type, last.storageClass], [many.at(-1).length, `"${md5(many.at(-1)).digest("hex").toUpperCase()}"`, "Normal", "Standard"], "entry");
    assert(Math.abs(Date.parse(last.lastModified) - Date.now()) < 60000, `LastModified ${last.lastModified}`);
    const sizes = [];
    const seen = [];
    let token;
    do {
      const r = await c.listV2({ prefix: "many/", "max-keys": 400, ...(token ? { "continuation-token": token } : {}) });
      sizes.push(r.objects.length);
      seen.push(...r.objects.map((o) => o.name));
      token = r.nextContinuationToken;
    } while (token);
    eq(sizes, [400, 400, 400, 300], "page sizes");
    eq(seen, many, "keys");
    const v = await vhostClient().listV2({ prefix: "many/", "max-keys": 1000, "continuation-token": p1.nextContinuationToken });
    eq(v.objects.length, 500, "virtual-hosted page 2");
  });

  await check("delete → 204, also when missing; then get → 404 NoSuchKey, head → 404", async () => {
    await c.put("gone.txt", Buffer.from("x"));
    eq((await c.delete("gone.txt")).res.status, 204, "delete");
    eq((await c.delete("gone.txt")).res.status, 204, "delete missing");
    await rejects(c.get("gone.txt"), { status: 404, code: "NoSuchKey" }, "get");
    await rejects(c.head("gone.txt"), { status: 404 }, "head");
    const d = await c.deleteMulti(["many/obj-00000", "many/obj-00001", "nothing"], { quiet: true });
    eq(d.res.status, 200, "deleteMulti (?delete, signed sub-resource)");
    await rejects(c.head("many/obj-00000"), { status: 404 }, "deleted by deleteMulti");
  });

  await check("wrong secret → 403 SignatureDoesNotMatch (OSS body: StringToSign, EC); unknown AccessKeyId → 403 InvalidAccessKeyId", async () => {
    const e = await rejects(pathClient({ accessKeySecret: "wrong" }).get("workspaces/a.tgz"), { status: 403, code: "SignatureDoesNotMatch" }, "path-style");
    await rejects(vhostClient({ accessKeySecret: "wrong" }).put("x", Buffer.from("x")), { status: 403, code: "SignatureDoesNotMatch" }, "virtual-hosted put");
    await rejects(pathClient({ accessKeySecret: "wrong" }).listV2({ prefix: "many/" }), { status: 403, code: "SignatureDoesNotMatch" }, "list");
    await rejects(pathClient({ accessKeyId: "LTAIsomeoneelse" }).get("workspaces/a.tgz"), { status: 403, code: "InvalidAccessKeyId" }, "unknown key");
    assert(e.requestId, "no x-oss-request-id");
    const r = rawRequest({ key: "workspaces/a.tgz", secret: "wrong" });
    eq([r.status, tag(r.body, "Code"), tag(r.body, "EC"), r.headers["x-oss-ec"], tag(r.body, "OSSAccessKeyId")], [403, "SignatureDoesNotMatch", "0002-00000040", "0002-00000040", CREDS.accessKeyId], "raw");
    assert(tag(r.body, "StringToSign").endsWith(`\n/${BUCKET}/workspaces/a.tgz`), `StringToSign ${tag(r.body, "StringToSign")}`);
    const anon = curl(`${endpoint}/${BUCKET}/workspaces/a.tgz`);
    eq([anon.status, tag(anon.body, "Code")], [403, "AccessDenied"], "anonymous");
  });

  await check("independent V1 signer, path-style with Date (as the storage agent): PUT with Content-MD5/Type and x-oss-meta, GET, list", async () => {
    const body = Buffer.from("raw body");
    let r = rawRequest({ method: "PUT", key: "raw/one.bin", body, headers: { "Content-Type": "application/pdf", "x-oss-meta-who": "raw" } });
    eq([r.status, r.headers.etag], [200, `"${md5(body).digest("hex").toUpperCase()}"`], `PUT (${r.body})`);
    r = rawRequest({ key: "raw/one.bin" });
    eq([r.status, r.body.toString(), r.headers["content-type"], r.headers["x-oss-meta-who"]], [200, "raw body", "application/pdf", "raw"], "GET");
    r = rawRequest({ key: oddKey });
    eq([r.status, r.body.toString()], [200, "odd"], "GET odd key (resource is the decoded key)");
    r = rawRequest({ key: "", query: [["list-type", "2"], ["prefix", "many/"], ["max-keys", "1000"]] });
    eq([r.status, tag(r.body, "KeyCount"), tag(r.body, "IsTruncated")], [200, "1000", "true"], "list page 1");
    assert(!/xmlns/.test(r.body.toString()), "OSS listings have no namespace");
    const token = tag(r.body, "NextContinuationToken");
    const q = [["list-type", "2"], ["prefix", "many/"], ["max-keys", "1000"], ["continuation-token", token]];
    r = rawRequest({ key: "", query: q, signed: ["continuation-token"] });
    eq([r.status, tag(r.body, "KeyCount")], [200, "498"], "page 2, continuation-token signed");
    r = rawRequest({ key: "", query: q, signed: [] });
    eq([r.status, tag(r.body, "Code")], [403, "SignatureDoesNotMatch"], "continuation-token not signed");
    r = rawRequest({ key: "", query: q, signed: ["continuation-token", "prefix"] });
    eq([r.status, tag(r.body, "Code")], [403, "SignatureDoesNotMatch"], "prefix signed (it is not a sub-resource)");
    r = rawRequest({ method: "DELETE", key: "raw/nothing" });
    eq(r.status, 204, "DELETE missing");
  });

  await check("independent signer: altered method/key/header/date/MD5 are refused", async () => {
    let r = rawRequest({ key: "raw/one.bin", tamper: (q) => (q.method = "DELETE") });
    eq([r.status, tag(r.body, "Code")], [403, "SignatureDoesNotMatch"], "method");
    r = rawRequest({ key: "raw/one.bin", tamper: (q) => (q.path = `/${BUCKET}/raw/one.bim`) });
    eq([r.status, tag(r.body, "Code")], [403, "SignatureDoesNotMatch"], "key");
    r = rawRequest({ key: "raw/one.bin", tamper: (q) => (q.headers["x-oss-meta-extra"] = "1") });
    eq([r.status, tag(r.body, "Code")], [403, "SignatureDoesNotMatch"], "unsigned x-oss header");
    r = rawRequest({ key: "raw/one.bin", tamper: (q) => q.query.push(["response-content-type", "text/html"]) });
    eq([r.status, tag(r.body, "Code")], [403, "SignatureDoesNotMatch"], "unsigned sub-resource");
    r = rawRequest({ key: "raw/one.bin", query: [["response-content-type", "text/html"]], signed: ["response-content-type"] });
    eq([r.status, r.headers["content-type"]], [200, "text/html"], "signed response-content-type");
    r = rawRequest({ key: "raw/one.bin", date: new Date(Date.now() - 3600e3) });
    eq([r.status, tag(r.body, "Code")], [403, "RequestTimeTooSkewed"], "an hour old");
    r = rawRequest({ key: "raw/one.bin", headers: { "x-oss-date": new Date().toUTCString() }, date: new Date(Date.now() - 3600e3) });
    eq(r.status, 200, "x-oss-date replaces an old Date");
    r = rawRequest({ method: "PUT", key: "raw/bad-md5", body: Buffer.from("abc"), headers: { "Content-MD5": md5("other").digest("base64") } });
    eq([r.status, tag(r.body, "Code")], [400, "BadDigest"], "wrong Content-MD5, correctly signed");
    r = rawRequest({ key: "raw/bad-md5" });
    eq(r.status, 404, "nothing stored");
  });

  await check("signatureUrl (ali-oss) works with curl; response-content-type override is signed", async () => {
    const url = c.signatureUrl("workspaces/a.tgz", { expires: 600 });
    eq(new URL(url).pathname, `/${BUCKET}/workspaces/a.tgz`, "path-style URL");
    let r = curl(url);
    eq([r.status, r.headers["content-type"]], [200, "application/gzip"], "GET");
    assert(r.body.equals(payload), "body");
    r = curl(url, { headers: { Range: "bytes=0-3" } });
    eq(r.status, 206, "Range (not signed)");
    r = curl(c.signatureUrl(oddKey, { expires: 600 }));
    eq([r.status, r.body.toString()], [200, "odd"], "odd key");
    r = curl(c.signatureUrl("workspaces/a.tgz", { expires: 600, response: { "content-type": "text/plain" } }));
    eq([r.status, r.headers["content-type"]], [200, "text/plain"], "response-content-type");
  });

  await check("signatureUrl altered → 403 SignatureDoesNotMatch: signature, key, Expires, method, extra sub-resource", async () => {
    const url = c.signatureUrl("workspaces/a.tgz", { expires: 600 });
    const sig = new URL(url).searchParams.get("Signature");
    const flipped = sig[0] === "A" ? `B${sig.slice(1)}` : `A${sig.slice(1)}`;
    const u = new URL(url);
    u.searchParams.set("Signature", flipped);
    let r = curl(u.toString());
    eq([r.status, tag(r.body, "Code"), tag(r.body, "EC"), tag(r.body, "SignatureProvided")], [403, "SignatureDoesNotMatch", "0002-00000040", flipped], "altered signature");
    r = curl(url.replace("/a.tgz?", "/b.tgz?"));
    eq([r.status, tag(r.body, "Code")], [403, "SignatureDoesNotMatch"], "other key");
    const e = new URL(url);
    e.searchParams.set("Expires", String(Number(e.searchParams.get("Expires")) + 100));
    r = curl(e.toString());
    eq([r.status, tag(r.body, "Code")], [403, "SignatureDoesNotMatch"], "later Expires");
    r = curl(url, { method: "DELETE" });
    eq([r.status, tag(r.body, "Code")], [403, "SignatureDoesNotMatch"], "DELETE with a GET URL");
    r = curl(`${url}&response-content-type=text/html`);
    eq([r.status, tag(r.body, "Code")], [403, "SignatureDoesNotMatch"], "extra response-content-type");
    eq((await c.head("workspaces/a.tgz")).status, 200, "object untouched");
  });

  await check("signatureUrl PUT with Content-Type: curl upload works; another Content-Type → 403", async () => {
    const url = c.signatureUrl("mineru/up.pdf", { method: "PUT", expires: 600, "Content-Type": "application/pdf" });
    let r = curl(url, { method: "PUT", data: "pdf?", headers: { "Content-Type": "text/plain" } });
    eq([r.status, tag(r.body, "Code")], [403, "SignatureDoesNotMatch"], "other type");
    r = curl(url, { method: "PUT", data: "pdf!", headers: { "Content-Type": "application/pdf" } });
    eq(r.status, 200, `upload (${r.body})`);
    eq((await c.get("mineru/up.pdf")).content.toString(), "pdf!", "stored");
  });

  await check("expired signatureUrl (expires 1 s, 2 s later) → 403 AccessDenied 'Request has expired.'", async () => {
    const url = c.signatureUrl("workspaces/a.tgz", { expires: 1 });
    await sleep(2000);
    const r = curl(url);
    eq([r.status, tag(r.body, "Code"), tag(r.body, "Message"), tag(r.body, "EC")], [403, "AccessDenied", "Request has expired.", "0002-00000069"], "expired");
  });

  await check("hooks: fail injects 503 for ali-oss; age sets LastModified seen by listV2", async () => {
    let r = await fetch(`${endpoint}/__test__/fail?count=1&status=503&method=PUT`, { method: "POST" });
    eq(r.status, 200, "fail hook");
    await rejects(c.put("retry.bin", Buffer.from("r")), { status: 503, code: "SlowDown" }, "injected");
    await c.put("retry.bin", Buffer.from("r"));
    r = await fetch(`${endpoint}/__test__/age?bucket=${BUCKET}&key=retry.bin&at=2020-01-02T03:04:05Z`, { method: "POST" });
    eq(r.status, 200, "age hook");
    eq((await c.listV2({ prefix: "retry.bin" })).objects[0].lastModified, "2020-01-02T03:04:05.000Z", "aged");
  });

  await check("outage: run stop / run start-oss on the same DATA_DIR and port keeps the objects", async () => {
    run("stop", dir);
    // ali-oss keeps connections in an agent shared by all clients: they died with the server.
    const fresh = () => pathClient({ agent: new http.Agent({ keepAlive: false }) });
    await rejects(fresh().head("retry.bin"), {}, "while stopped");
    eq(spawnSync(RUN, ["start-oss", port, dir], { encoding: "utf8" }).stdout.trim(), endpoint, "endpoint");
    assert((await fresh().get("workspaces/a.tgz")).content.equals(payload), "body after restart");
  });

  await check("server log prints the string to sign of refused signatures", async () => {
    const log = fs.readFileSync(path.join(dir, "s3server.log"), "utf8");
    assert(/SignatureDoesNotMatch[^\n]*\n  string to sign:\n    GET\n/.test(log), "no string to sign in s3server.log");
  });
} finally {
  spawnSync(RUN, ["stop", dir]);
  if (!process.env.SELFTEST_KEEP) fs.rmSync(tmp, { recursive: true, force: true });
  else console.log(`# kept ${tmp}`);
}

console.log(`1..${n}`);
console.log(failed ? `# FAILED ${failed} of ${n}` : `# all ${n} passed`);
process.exit(failed ? 1 : 0);
