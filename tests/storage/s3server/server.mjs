#!/usr/bin/env node
// SPDX-License-Identifier: LGPL-2.1-or-later
// S3-compatible test server: the path-style subset of the S3 REST API that the storage agent uses, with
// every request's SigV4 signature (Authorization header or presigned query) recomputed by the official
// signer, @smithy/signature-v4, and refused the way AWS refuses it. Objects live on disk under DATA_DIR,
// so they survive a stop/start ("outage"). See README.md for the supported API and the /__test__ hooks.
//
// Usage: node server.mjs [--port PORT] [--data DATA_DIR] [--host 127.0.0.1] [--provider s3|oss] [--oss]
//   --oss (or S3_TEST_PROVIDER=oss): Aliyun OSS mode, see oss.mjs: OSS V1 signatures instead of SigV4,
//   OSS's error bodies and headers, x-oss-meta-*, path-style and virtual-hosted addressing; the same store,
//   operations and hooks. Credentials then come from OSS_TEST_ACCESS_KEY_ID [LTAIscopeboxTEST] and
//   OSS_TEST_ACCESS_KEY_SECRET [ScopeboxOssTestSecret0123456789].
//   Environment (defaults in brackets):
//     S3_TEST_PORT [0 = any free port], S3_TEST_DATA_DIR, S3_TEST_HOST [127.0.0.1]
//     S3_TEST_ACCESS_KEY [AKIDSCOPEBOXTEST], S3_TEST_SECRET_KEY [see DEFAULT_SECRET], S3_TEST_REGION [us-east-1]
//     S3_TEST_BUCKETS [scopebox-test]   comma-separated buckets created at startup
//     S3_TEST_MAX_KEYS [1000]           server-side cap of keys per list page (AWS: 1000)
//     S3_TEST_MAX_SKEW_S [900]          allowed clock difference of header-signed requests (AWS: 15 min)
//     S3_TEST_HOOKS [1]                 0 disables the unsigned /__test__/ endpoints
//     S3_TEST_NOW [unset]               fixed "now" (ISO 8601 or Unix seconds) for the expiry and clock
//                                       skew checks only, to replay published signing examples
// Writes DATA_DIR/port once it listens; logs one line per request on stdout.
import http from "node:http";
import crypto from "node:crypto";
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import zlib from "node:zlib";
import { once } from "node:events";
import { SignatureV4, createScope, getCanonicalHeaders } from "@smithy/signature-v4";
import { HttpRequest } from "@smithy/protocol-http";
import { Hash } from "@smithy/hash-node";
import { OSS_DEFAULT_ACCESS_KEY, OSS_DEFAULT_SECRET, makeOssAuth, ossBucketFromHost } from "./oss.mjs";

const DEFAULT_SECRET = "ScopeboxTestSecretKey/0123456789+abcdefgh";

// ---------------------------------------------------------------------------------------------------
// Configuration

function parseArgs(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const m = /^--([a-z-]+)(?:=(.*))?$/.exec(a);
    if (!m) {
      // Positional: PORT DATA_DIR
      if (o.port === undefined && /^\d+$/.test(a)) o.port = a;
      else if (o.data === undefined) o.data = a;
      else throw new Error(`unexpected argument '${a}'`);
      continue;
    }
    const [, name, inline] = m;
    if (name === "no-test-hooks") {
      o.hooks = "0";
      continue;
    }
    if (name === "oss") {
      o.provider = "oss";
      continue;
    }
    const value = inline ?? argv[++i];
    if (value === undefined) throw new Error(`--${name} needs a value`);
    o[name] = value;
  }
  return o;
}

const args = parseArgs(process.argv.slice(2));
const env = process.env;
const PROVIDER = args.provider ?? env.S3_TEST_PROVIDER ?? "s3";
if (PROVIDER !== "s3" && PROVIDER !== "oss") {
  console.error(`server.mjs: unknown provider '${PROVIDER}' (s3 or oss)`);
  process.exit(2);
}
const OSS = PROVIDER === "oss";
const CONFIG = {
  provider: PROVIDER,
  host: args.host ?? env.S3_TEST_HOST ?? "127.0.0.1",
  port: Number(args.port ?? env.S3_TEST_PORT ?? 0),
  dataDir: args.data ?? env.S3_TEST_DATA_DIR,
  accessKey: OSS ? env.OSS_TEST_ACCESS_KEY_ID || OSS_DEFAULT_ACCESS_KEY : env.S3_TEST_ACCESS_KEY || "AKIDSCOPEBOXTEST",
  secretKey: OSS ? env.OSS_TEST_ACCESS_KEY_SECRET || OSS_DEFAULT_SECRET : env.S3_TEST_SECRET_KEY || DEFAULT_SECRET,
  region: env.S3_TEST_REGION || "us-east-1",
  buckets: (env.S3_TEST_BUCKETS ?? "scopebox-test").split(",").map((s) => s.trim()).filter(Boolean),
  maxKeys: Number(env.S3_TEST_MAX_KEYS || 1000),
  maxSkewMs: Number(env.S3_TEST_MAX_SKEW_S || 900) * 1000,
  hooks: (args.hooks ?? env.S3_TEST_HOOKS ?? "1") !== "0",
  fixedNow: env.S3_TEST_NOW ? (/^\d+$/.test(env.S3_TEST_NOW) ? Number(env.S3_TEST_NOW) * 1000 : Date.parse(env.S3_TEST_NOW)) : null,
};
if (Number.isNaN(CONFIG.fixedNow)) {
  console.error(`server.mjs: bad S3_TEST_NOW '${env.S3_TEST_NOW}'`);
  process.exit(2);
}
// The clock of the signature checks (expiry, skew).
const authNow = () => CONFIG.fixedNow ?? Date.now();
if (!CONFIG.dataDir) {
  console.error("server.mjs: no data directory (--data DIR or S3_TEST_DATA_DIR)");
  process.exit(2);
}
if (!Number.isInteger(CONFIG.port) || CONFIG.port < 0 || CONFIG.port > 65535) {
  console.error(`server.mjs: bad port '${args.port ?? env.S3_TEST_PORT}'`);
  process.exit(2);
}
if (!Number.isInteger(CONFIG.maxKeys) || CONFIG.maxKeys < 1 || CONFIG.maxKeys > 1000) {
  console.error("server.mjs: S3_TEST_MAX_KEYS must be 1…1000");
  process.exit(2);
}
for (const b of CONFIG.buckets) {
  if (!validBucketName(b)) {
    console.error(`server.mjs: invalid bucket name '${b}' (S3: 3-63 characters a-z 0-9 . -, starting and ending with a letter or digit)`);
    process.exit(2);
  }
}
CONFIG.dataDir = path.resolve(CONFIG.dataDir);

const MAX_PRESIGNED_EXPIRES = 604800;
const MAX_PUT_BYTES = 5 * 1024 ** 3;
const MAX_SMALL_BODY = 16 * 1024 * 1024; // bodies that are not object data (DeleteObjects XML, …)
const EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
const XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/";
// Headers stored with an object and returned by GET/HEAD, besides Content-Type and x-amz-meta-*.
const STORED_HEADERS = ["cache-control", "content-disposition", "content-encoding", "content-language", "expires"];
// Query parameters of GET that override response headers.
const RESPONSE_OVERRIDES = {
  "response-content-type": "content-type",
  "response-content-language": "content-language",
  "response-expires": "expires",
  "response-cache-control": "cache-control",
  "response-content-disposition": "content-disposition",
  "response-content-encoding": "content-encoding",
};

function validBucketName(b) {
  return /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(b) && !/\.\.|^\d+\.\d+\.\d+\.\d+$/.test(b);
}

// ---------------------------------------------------------------------------------------------------
// Errors and XML

class S3Error extends Error {
  constructor(status, code, message, extra = []) {
    super(message);
    this.status = status;
    this.code = code;
    this.extra = extra; // [[element, value], …] added to the <Error> body
  }
}

// Control characters as numeric references, the way S3 writes keys that have them (&#x1;, &#xD;): XML
// 1.0 has no raw form for most of them, which is why clients ask for encoding-type=url.
function xmlEscape(s) {
  return String(s).replace(/[&<>"'\x00-\x08\x0b\x0c\x0e-\x1f\x7f\r]/g, (c) =>
    ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;" })[c] ?? `&#x${c.charCodeAt(0).toString(16).toUpperCase()};`);
}

function xmlUnescape(s) {
  return s.replace(/&(#x[0-9a-fA-F]+|#\d+|amp|lt|gt|quot|apos);/g, (_, e) => {
    if (e[0] === "#") return String.fromCodePoint(e[1] === "x" ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10));
    return { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" }[e];
  });
}

function xmlElement(name, value) {
  return `<${name}>${xmlEscape(value)}</${name}>`;
}

function xmlDocument(body) {
  return `<?xml version="1.0" encoding="UTF-8"?>\n${body}`;
}

// ---------------------------------------------------------------------------------------------------
// URL handling

// AWS UriEncode(): every byte but A-Z a-z 0-9 - _ . ~ becomes %XX; '/' kept when keepSlash.
function awsUriEncode(s, keepSlash) {
  const e = encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return keepSlash ? e.replace(/%2F/g, "/") : e;
}

function decodeComponent(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    throw new S3Error(400, "InvalidURI", "Couldn't parse the specified URI.");
  }
}

// The query as the signer wants it: names → decoded value, or an array of values when repeated.
// A parameter without '=' has the empty value ("?delete" is signed as "delete=").
function parseQuery(raw) {
  const query = Object.create(null);
  if (!raw) return query;
  for (const part of raw.split("&")) {
    if (part === "") continue;
    const eq = part.indexOf("=");
    const name = decodeComponent(eq < 0 ? part : part.slice(0, eq));
    const value = eq < 0 ? "" : decodeComponent(part.slice(eq + 1));
    if (Object.hasOwn(query, name)) query[name] = [].concat(query[name], value);
    else query[name] = value;
  }
  return query;
}

function single(query, name) {
  const v = query[name];
  return Array.isArray(v) ? v[0] : v;
}

// ---------------------------------------------------------------------------------------------------
// Storage: DATA_DIR/buckets/<bucket>/<sha256(key)>.json (metadata, including the key) and
// <sha256(key)>.<random>.data (content); an in-memory index answers lookups and listings.

const buckets = new Map(); // name → { objects: Map<key, meta>, sorted: string[] | null }
const tmpDir = path.join(CONFIG.dataDir, "tmp");
const bucketsDir = path.join(CONFIG.dataDir, "buckets");

function utf8Compare(a, b) {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}

function sortedKeys(bucket) {
  if (!bucket.sorted) bucket.sorted = [...bucket.objects.keys()].sort(utf8Compare);
  return bucket.sorted;
}

function keyId(key) {
  return crypto.createHash("sha256").update(key, "utf8").digest("hex");
}

function bucketDir(name) {
  return path.join(bucketsDir, name);
}

async function writeFileAtomic(file, data) {
  const tmp = path.join(tmpDir, `${crypto.randomUUID()}.tmp`);
  await fsp.writeFile(tmp, data);
  await fsp.rename(tmp, file);
}

async function saveMeta(bucketName, meta) {
  await writeFileAtomic(path.join(bucketDir(bucketName), `${keyId(meta.key)}.json`), JSON.stringify(meta));
}

async function loadStorage() {
  await fsp.rm(tmpDir, { recursive: true, force: true });
  await fsp.mkdir(tmpDir, { recursive: true });
  await fsp.mkdir(bucketsDir, { recursive: true });
  for (const b of CONFIG.buckets) await fsp.mkdir(bucketDir(b), { recursive: true });
  for (const name of await fsp.readdir(bucketsDir)) {
    if (!validBucketName(name)) continue;
    const dir = bucketDir(name);
    const objects = new Map();
    const referenced = new Set();
    const files = await fsp.readdir(dir);
    for (const f of files.filter((f) => f.endsWith(".json"))) {
      const meta = JSON.parse(await fsp.readFile(path.join(dir, f), "utf8"));
      objects.set(meta.key, meta);
      referenced.add(meta.file);
    }
    // Content files left behind by a replace or delete that was interrupted.
    for (const f of files.filter((f) => f.endsWith(".data") && !referenced.has(f))) await fsp.rm(path.join(dir, f), { force: true });
    buckets.set(name, { objects, sorted: null });
  }
}

function getBucket(name) {
  const b = buckets.get(name);
  if (!b) throw new S3Error(404, "NoSuchBucket", "The specified bucket does not exist", [["BucketName", name]]);
  return b;
}

async function deleteObject(bucketName, key) {
  const bucket = getBucket(bucketName);
  const meta = bucket.objects.get(key);
  if (!meta) return false;
  bucket.objects.delete(key);
  bucket.sorted = null;
  const dir = bucketDir(bucketName);
  await fsp.rm(path.join(dir, `${keyId(key)}.json`), { force: true });
  await fsp.rm(path.join(dir, meta.file), { force: true });
  return true;
}

// ---------------------------------------------------------------------------------------------------
// Request bodies: hashed while read; object data goes to a temporary file, everything else to memory.

function crc32Base64(crc) {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(crc >>> 0);
  return b.toString("base64");
}

// Checks the body against x-amz-content-sha256 (when it is a hash), Content-MD5 and the
// x-amz-checksum-{crc32,sha1,sha256} headers. Returns { size, md5, buffer | file }.
async function readBody(req, ctx, { toFile }) {
  const sha256 = crypto.createHash("sha256");
  const md5 = crypto.createHash("md5");
  const sha1 = req.headers["x-amz-checksum-sha1"] ? crypto.createHash("sha1") : null;
  const wantCrc32 = req.headers["x-amz-checksum-crc32"];
  let crc = 0;
  let size = 0;
  const chunks = [];
  let ws = null;
  let file = null;
  if (toFile) {
    file = path.join(tmpDir, `${crypto.randomUUID()}.data`);
    ws = fs.createWriteStream(file);
  }
  ctx.bodyStarted = true;
  if (ctx.expectContinue) ctx.res.writeContinue();
  try {
    for await (const chunk of req) {
      size += chunk.length;
      if (ctx.cutAfter !== undefined && size >= ctx.cutAfter) {
        // /__test__/cut: the connection breaks mid-body, as a network or a dying client would.
        process.stdout.write(`${new Date().toISOString()} ${req.method} ${req.url} cut after ${size} body bytes (/__test__/cut)\n`);
        req.socket.destroy();
        const e = new Error("connection cut by /__test__/cut");
        e.code = "ECONNRESET";
        throw e;
      }
      sha256.update(chunk);
      md5.update(chunk);
      sha1?.update(chunk);
      if (wantCrc32) crc = zlib.crc32(chunk, crc);
      if (ws) {
        if (!ws.write(chunk)) await once(ws, "drain");
      } else {
        if (size > MAX_SMALL_BODY) throw new S3Error(400, "MaxMessageLengthExceeded", "Your request was too big.");
        chunks.push(chunk);
      }
    }
    if (ws) {
      ws.end();
      await once(ws, "finish");
    }
    ctx.bodyDone = true;
    const declared = req.headers["content-length"];
    if (declared !== undefined && Number(declared) !== size)
      throw new S3Error(400, "IncompleteBody", "You did not provide the number of bytes specified by the Content-Length HTTP header.");
    const md5Digest = md5.digest();
    const shaHex = sha256.digest("hex");
    if (ctx.payloadHash && /^[0-9a-f]{64}$/.test(ctx.payloadHash) && ctx.payloadHash !== shaHex) {
      throw new S3Error(400, "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed.", [
        ["ClientComputedContentSHA256", ctx.payloadHash],
        ["S3ComputedContentSHA256", shaHex],
      ]);
    }
    const contentMd5 = req.headers["content-md5"];
    if (contentMd5 !== undefined) {
      const given = Buffer.from(contentMd5, "base64");
      if (given.length !== 16 || given.toString("base64") !== contentMd5.trim())
        throw new S3Error(400, "InvalidDigest", "The Content-MD5 you specified was invalid.", [["Content-MD5", contentMd5]]);
      if (!given.equals(md5Digest))
        throw new S3Error(400, "BadDigest", "The Content-MD5 you specified did not match what we received.", [
          ["ExpectedDigest", contentMd5],
          ["CalculatedDigest", md5Digest.toString("base64")],
        ]);
    }
    if (wantCrc32 && wantCrc32 !== crc32Base64(crc))
      throw new S3Error(400, "BadDigest", "The CRC32 you specified did not match the calculated checksum.");
    if (sha1 && req.headers["x-amz-checksum-sha1"] !== sha1.digest("base64"))
      throw new S3Error(400, "BadDigest", "The SHA1 you specified did not match the calculated checksum.");
    const wantSha256 = req.headers["x-amz-checksum-sha256"];
    if (wantSha256 && wantSha256 !== Buffer.from(shaHex, "hex").toString("base64"))
      throw new S3Error(400, "BadDigest", "The SHA256 you specified did not match the calculated checksum.");
    return { size, md5: md5Digest.toString("hex"), file, buffer: ws ? null : Buffer.concat(chunks) };
  } catch (e) {
    if (ws) {
      ws.destroy();
      await fsp.rm(file, { force: true });
    }
    throw e;
  }
}

// ---------------------------------------------------------------------------------------------------
// Authentication: SigV4 recomputed with @smithy/signature-v4

const ALGORITHM = "AWS4-HMAC-SHA256";
const AMZ_DATE = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/;

// Keeps the canonical request and string to sign of the last signature, for SignatureDoesNotMatch bodies.
class RecordingSigner extends SignatureV4 {
  async getSignature(longDate, credentialScope, keyPromise, canonicalRequest) {
    this.canonicalRequest = canonicalRequest;
    this.stringToSign = await this.createStringToSign(longDate, credentialScope, canonicalRequest, ALGORITHM);
    return super.getSignature(longDate, credentialScope, keyPromise, canonicalRequest);
  }
}

function newSigner() {
  return new RecordingSigner({
    credentials: { accessKeyId: CONFIG.accessKey, secretAccessKey: CONFIG.secretKey },
    region: CONFIG.region,
    service: "s3",
    sha256: Hash.bind(null, "sha256"),
    uriEscapePath: false, // S3: the path is encoded once, by us (canonicalPath)
    applyChecksum: false, // verify exactly the headers the client signed
  });
}

function parseAmzDate(s) {
  const m = AMZ_DATE.exec(s ?? "");
  if (!m) return null;
  const [, Y, M, D, h, mi, se] = m.map(Number);
  const t = Date.UTC(Y, M - 1, D, h, mi, se);
  const d = new Date(t);
  // Reject dates like 20240231 that Date.UTC would roll over.
  if (Number.isNaN(t) || d.getUTCDate() !== D || d.getUTCMonth() !== M - 1 || d.getUTCHours() !== h) return null;
  return d;
}

function isoSeconds(ms) {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
}

// Header values as sent, per lowercase name: repeated headers joined with ',' (SigV4's rule).
function headerValues(req) {
  const h = Object.create(null);
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i].toLowerCase();
    const value = req.rawHeaders[i + 1].trim();
    h[name] = Object.hasOwn(h, name) ? `${h[name]},${value}` : value;
  }
  return h;
}

function checkCredential(credential, amzDate, malformed) {
  const parts = credential.split("/");
  if (parts.length !== 5) throw malformed(`the Credential is mal-formed; expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".`);
  const [akid, date, region, service, terminal] = parts;
  if (akid !== CONFIG.accessKey)
    throw new S3Error(403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.", [["AWSAccessKeyId", akid]]);
  if (date !== amzDate.slice(0, 8)) throw malformed(`Invalid credential date "${date}". This date is not the same as X-Amz-Date: "${amzDate.slice(0, 8)}".`);
  if (region !== CONFIG.region) throw malformed(`the region '${region}' is wrong; expecting '${CONFIG.region}'`, [["Region", CONFIG.region]]);
  if (service !== "s3") throw malformed(`incorrect service "${service}". This endpoint belongs to "s3".`);
  if (terminal !== "aws4_request") throw malformed(`incorrect terminal "${terminal}". This endpoint uses "aws4_request".`);
  return akid;
}

function checkPayloadHashValue(v) {
  if (v === "UNSIGNED-PAYLOAD" || /^[0-9a-f]{64}$/.test(v)) return;
  if (/^STREAMING-/.test(v))
    throw new S3Error(501, "NotImplemented", `scopebox test server: chunked uploads (x-amz-content-sha256: ${v}) are not implemented`);
  throw new S3Error(400, "InvalidArgument", "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER, STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD, STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER or a valid sha256 value.", [
    ["ArgumentName", "x-amz-content-sha256"],
    ["ArgumentValue", v],
  ]);
}

// AWS refuses x-amz-* headers that are sent but not signed.
function checkUnsignedAmzHeaders(headers, signed) {
  const unsigned = Object.keys(headers).filter((h) => h.startsWith("x-amz-") && !signed.has(h));
  if (unsigned.length) throw new S3Error(403, "AccessDenied", "There were headers present in the request which were not signed", [["HeadersNotSigned", unsigned.join(", ")]]);
}

function signatureMismatch(signer, akid, provided) {
  const cr = signer.canonicalRequest ?? "";
  const sts = signer.stringToSign ?? "";
  const bytes = (s) => [...Buffer.from(s, "utf8")].map((b) => b.toString(16).padStart(2, "0")).join(" ");
  return new S3Error(403, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your key and signing method.", [
    ["AWSAccessKeyId", akid],
    ["StringToSign", sts],
    ["SignatureProvided", provided],
    ["StringToSignBytes", bytes(sts)],
    ["CanonicalRequest", cr],
    ["CanonicalRequestBytes", bytes(cr)],
  ]);
}

function sameSignature(a, b) {
  const x = Buffer.from(a, "utf8");
  const y = Buffer.from(b, "utf8");
  return x.length === y.length && crypto.timingSafeEqual(x, y);
}

// The request the signer sees: only the signed headers (plus x-amz-content-sha256 for the payload
// hash when it is not signed itself), the decoded query, the path encoded once.
function signerRequest(ctx, headers, query) {
  return new HttpRequest({
    method: ctx.req.method,
    protocol: "http:",
    hostname: "unused", // the signer takes the host from the Host header, when signed
    path: ctx.canonicalPath,
    query,
    headers,
  });
}

async function authenticate(ctx) {
  if (OSS) return authenticateOss(ctx);
  const { req, query } = ctx;
  const headers = headerValues(req);
  const authorization = headers.authorization;
  const presigned = Object.hasOwn(query, "X-Amz-Algorithm");
  if (authorization !== undefined && presigned)
    throw new S3Error(400, "InvalidArgument", "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query string parameter or the Authorization header should be specified", [
      ["ArgumentName", "Authorization"],
      ["ArgumentValue", authorization],
    ]);
  if (headers["x-amz-security-token"] !== undefined || Object.hasOwn(query, "X-Amz-Security-Token"))
    throw new S3Error(400, "InvalidToken", "The provided token is malformed or otherwise invalid.");
  if (authorization !== undefined) return authenticateHeader(ctx, headers, authorization);
  if (presigned) return authenticatePresigned(ctx, headers);
  if (Object.hasOwn(query, "Signature") || Object.hasOwn(query, "AWSAccessKeyId"))
    throw new S3Error(400, "InvalidRequest", "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.");
  ctx.auth = "anonymous";
  throw new S3Error(403, "AccessDenied", "Access Denied");
}

async function authenticateHeader(ctx, headers, authorization) {
  ctx.auth = "header";
  const malformed = (detail, extra = []) =>
    new S3Error(400, "AuthorizationHeaderMalformed", `The authorization header is malformed; ${detail}`, extra);
  if (!authorization.startsWith(`${ALGORITHM} `)) {
    if (/^AWS /.test(authorization) || /^AWS4-/.test(authorization))
      throw new S3Error(400, "InvalidRequest", "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.");
    throw new S3Error(400, "InvalidArgument", "Unsupported Authorization Type", [
      ["ArgumentName", "Authorization"],
      ["ArgumentValue", authorization],
    ]);
  }
  const fields = {};
  for (const part of authorization.slice(ALGORITHM.length + 1).split(/\s*,\s*/)) {
    const eq = part.indexOf("=");
    if (eq > 0) fields[part.slice(0, eq).trim()] = part.slice(eq + 1).trim();
  }
  for (const f of ["Credential", "SignedHeaders", "Signature"])
    if (!fields[f]) throw malformed(`the authorization component "${f}" is missing or malformed.`);
  const amzDate = headers["x-amz-date"];
  const signingDate = parseAmzDate(amzDate);
  if (!signingDate) throw new S3Error(403, "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header");
  const akid = checkCredential(fields.Credential, amzDate, malformed);
  ctx.accessKey = akid;
  const skew = Math.abs(authNow() - signingDate.getTime());
  if (skew > CONFIG.maxSkewMs)
    throw new S3Error(403, "RequestTimeTooSkewed", "The difference between the request time and the current time is too large.", [
      ["RequestTime", amzDate],
      ["ServerTime", isoSeconds(authNow())],
      ["MaxAllowedSkewMilliseconds", String(CONFIG.maxSkewMs)],
    ]);
  const payloadHash = headers["x-amz-content-sha256"];
  if (payloadHash === undefined) throw new S3Error(400, "InvalidRequest", "Missing required header for this request: x-amz-content-sha256");
  checkPayloadHashValue(payloadHash);
  ctx.payloadHash = payloadHash;
  const signed = new Set(fields.SignedHeaders.split(";"));
  if (!signed.has("host")) throw malformed("scopebox test server: SignedHeaders must include host.");
  checkUnsignedAmzHeaders(headers, signed);

  const toSign = Object.create(null);
  for (const name of signed) if (headers[name] !== undefined) toSign[name] = headers[name];
  toSign["x-amz-content-sha256"] = payloadHash; // signed (checked above): gives the signer the payload hash
  const signer = newSigner();
  const request = signerRequest(ctx, toSign, ctx.query);
  let expected;
  if (!signed.has("date")) {
    const out = await signer.sign(request, { signingDate, signableHeaders: signed });
    expected = /Signature=([0-9a-f]{64})$/.exec(out.headers.authorization)[1];
  } else {
    // SignatureV4.sign() drops a Date header (it would set X-Amz-Date instead), yet S3 accepts Date
    // signed along with X-Amz-Date (the PUT example of the S3 documentation). The same steps from the
    // same package, without that removal.
    const { longDate, shortDate } = signer.formatDate(signingDate);
    request.headers["x-amz-date"] = longDate;
    const credentials = { accessKeyId: CONFIG.accessKey, secretAccessKey: CONFIG.secretKey };
    expected = await signer.getSignature(
      longDate,
      createScope(shortDate, CONFIG.region, "s3"),
      signer.getSigningKey(credentials, CONFIG.region, shortDate, "s3"),
      signer.createCanonicalRequest(request, getCanonicalHeaders(request, undefined, signed), payloadHash),
    );
  }
  if (!sameSignature(expected, fields.Signature)) throw signatureMismatch(signer, akid, fields.Signature);
}

async function authenticatePresigned(ctx, headers) {
  ctx.auth = "presigned";
  const q = ctx.query;
  const bad = (message, extra = []) => new S3Error(400, "AuthorizationQueryParametersError", message, extra);
  const names = ["X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature", "X-Amz-Date", "X-Amz-SignedHeaders", "X-Amz-Expires"];
  for (const n of names) {
    if (typeof q[n] !== "string" || (q[n] === "" && n !== "X-Amz-Expires"))
      throw bad("Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.");
  }
  if (q["X-Amz-Algorithm"] !== ALGORITHM) throw bad('X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"');
  const amzDate = q["X-Amz-Date"];
  const signingDate = parseAmzDate(amzDate);
  if (!signingDate) throw bad("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"");
  const akid = checkCredential(q["X-Amz-Credential"], amzDate, (detail, extra = []) => bad(`Error parsing the X-Amz-Credential parameter; ${detail}`, extra));
  ctx.accessKey = akid;
  const expiresText = q["X-Amz-Expires"];
  if (!/^\d+$/.test(expiresText)) throw bad("X-Amz-Expires should be a number");
  const expires = Number(expiresText);
  if (expires > MAX_PRESIGNED_EXPIRES) throw bad("X-Amz-Expires must be less than a week (in seconds) that is 604800");
  const now = authNow();
  if (now > signingDate.getTime() + expires * 1000)
    throw new S3Error(403, "AccessDenied", "Request has expired", [
      ["X-Amz-Expires", expiresText],
      ["Expires", isoSeconds(signingDate.getTime() + expires * 1000)],
      ["ServerTime", isoSeconds(now)],
    ]);
  if (signingDate.getTime() > now + CONFIG.maxSkewMs)
    throw new S3Error(403, "AccessDenied", "Request is not valid yet", [
      ["X-Amz-Date", amzDate],
      ["ServerTime", isoSeconds(now)],
    ]);
  const signed = new Set(q["X-Amz-SignedHeaders"].split(";"));
  if (!signed.has("host")) throw bad("scopebox test server: X-Amz-SignedHeaders must include host.");
  checkUnsignedAmzHeaders(headers, signed);
  // S3 presigned URLs sign UNSIGNED-PAYLOAD unless they name a payload hash themselves.
  const payloadHash = q["X-Amz-Content-Sha256"] ?? headers["x-amz-content-sha256"] ?? "UNSIGNED-PAYLOAD";
  if (typeof payloadHash !== "string") throw bad("X-Amz-Content-Sha256 is repeated");
  checkPayloadHashValue(payloadHash);
  ctx.payloadHash = payloadHash;

  // The signer adds the X-Amz-Algorithm/Credential/Date/Expires/SignedHeaders parameters itself.
  const query = { ...q };
  for (const n of names) delete query[n];
  const toSign = Object.create(null);
  for (const name of signed) if (headers[name] !== undefined) toSign[name] = headers[name];
  const unsignable = new Set();
  if (!signed.has("x-amz-content-sha256")) {
    toSign["x-amz-content-sha256"] = payloadHash; // only the payload hash, neither signed nor moved to the query
    unsignable.add("x-amz-content-sha256");
  }
  const signer = newSigner();
  const out = await signer.presign(signerRequest(ctx, toSign, query), {
    signingDate,
    expiresIn: expires,
    signableHeaders: signed,
    unsignableHeaders: unsignable,
    unhoistableHeaders: new Set(Object.keys(toSign)), // they came as headers: keep them there
  });
  const provided = q["X-Amz-Signature"];
  if (out.query["X-Amz-SignedHeaders"] !== q["X-Amz-SignedHeaders"] || !sameSignature(out.query["X-Amz-Signature"], provided))
    throw signatureMismatch(signer, akid, provided);
}

// OSS mode: V1 signatures, verified with ali-oss's string-to-sign builder (oss.mjs).
const authenticateOss = OSS ? makeOssAuth({ CONFIG, S3Error, authNow, headerValues, single, sameSignature }) : null;

// ---------------------------------------------------------------------------------------------------
// Responses

function newRequestId() {
  return crypto.randomBytes(8).toString("hex").toUpperCase();
}

function baseHeaders(ctx) {
  if (OSS) return { "x-oss-request-id": ctx.requestId, server: "AliyunOSS" };
  return {
    "x-amz-request-id": ctx.requestId,
    "x-amz-id-2": Buffer.from(`scopebox-${ctx.requestId}`).toString("base64"),
    server: "ScopeboxS3Test",
  };
}

function sendXml(ctx, status, body, extraHeaders = {}) {
  const data = Buffer.from(xmlDocument(body), "utf8");
  ctx.status = status;
  ctx.res.writeHead(status, { ...baseHeaders(ctx), "content-type": "application/xml", "content-length": data.length, ...extraHeaders });
  ctx.res.end(ctx.req.method === "HEAD" ? undefined : data);
}

function sendEmpty(ctx, status, extraHeaders = {}) {
  ctx.status = status;
  ctx.res.writeHead(status, { ...baseHeaders(ctx), "content-length": 0, ...extraHeaders });
  ctx.res.end();
}

function sendError(ctx, err) {
  ctx.status = err.status;
  ctx.code = err.code;
  const headers = { ...baseHeaders(ctx) };
  // A body we have not read (refused before it was read, or a 100-continue not sent): do not keep the
  // connection, or the rest of the body would be taken for the next request.
  if (!ctx.bodyDone) headers.connection = "close";
  if (err.code === "InvalidRange" && err.size !== undefined) headers["content-range"] = `bytes */${err.size}`;
  if (ctx.req.method === "HEAD") {
    ctx.res.writeHead(err.status, { ...headers, "content-length": 0 });
    ctx.res.end();
    return;
  }
  let body = `<Error>${xmlElement("Code", err.code)}${xmlElement("Message", err.message)}`;
  if (OSS) {
    // OSS's shape: Code, Message, RequestId, HostId (the Host), then the details, the EC number last.
    body += `${xmlElement("RequestId", ctx.requestId)}${xmlElement("HostId", ctx.req.headers.host ?? "")}`;
    for (const [k, v] of err.extra) if (k !== "EC") body += xmlElement(k, v);
    if (ctx.bucket && err.code === "NoSuchBucket" && !err.extra.some(([k]) => k === "BucketName")) body += xmlElement("BucketName", ctx.bucket);
    if (ctx.key !== undefined && err.code === "NoSuchKey") body += xmlElement("Key", ctx.key);
    const ec = err.extra.find(([k]) => k === "EC")?.[1];
    if (ec) {
      body += xmlElement("EC", ec);
      headers["x-oss-ec"] = ec;
    }
    body += "</Error>";
    const data = Buffer.from(xmlDocument(body), "utf8");
    ctx.res.writeHead(err.status, { ...headers, "content-type": "application/xml", "content-length": data.length });
    ctx.res.end(data);
    return;
  }
  for (const [k, v] of err.extra) body += xmlElement(k, v);
  if (ctx.bucket && !err.extra.some(([k]) => k === "BucketName")) body += xmlElement("BucketName", ctx.bucket);
  if (ctx.key !== undefined) body += xmlElement("Key", ctx.key);
  body += `${xmlElement("RequestId", ctx.requestId)}${xmlElement("HostId", baseHeaders(ctx)["x-amz-id-2"])}</Error>`;
  const data = Buffer.from(xmlDocument(body), "utf8");
  ctx.res.writeHead(err.status, { ...headers, "content-type": "application/xml", "content-length": data.length });
  ctx.res.end(data);
}

function sendJson(ctx, status, value) {
  const data = Buffer.from(`${JSON.stringify(value, null, 1)}\n`);
  ctx.status = status;
  ctx.res.writeHead(status, { "content-type": "application/json", "content-length": data.length });
  ctx.res.end(data);
}

// ---------------------------------------------------------------------------------------------------
// Object operations

// OSS writes the MD5 ETag in upper case, S3 in lower case.
function etagOf(meta) {
  return `"${OSS ? meta.etag.toUpperCase() : meta.etag}"`;
}

function objectHeaders(meta) {
  const h = {
    "content-type": meta.contentType,
    etag: etagOf(meta),
    "last-modified": new Date(meta.lastModified).toUTCString(),
    "accept-ranges": "bytes",
  };
  for (const [k, v] of Object.entries(meta.headers ?? {})) h[k] = v;
  for (const [k, v] of Object.entries(meta.userMeta ?? {})) h[k] = v;
  return h;
}

function notImplemented(what) {
  return new S3Error(501, "NotImplemented", `scopebox test server: ${what} is not implemented`);
}

async function putObject(ctx) {
  const { req } = ctx;
  const bucket = getBucket(ctx.bucket);
  if (req.headers[OSS ? "x-oss-copy-source" : "x-amz-copy-source"] !== undefined) return copyObject(ctx, bucket);
  if (req.headers["x-amz-copy-source"] !== undefined || req.headers["x-oss-copy-source"] !== undefined) throw notImplemented("CopyObject of the other provider");
  const lengthHeader = req.headers["content-length"];
  if (lengthHeader === undefined) throw new S3Error(411, "MissingContentLength", "You must provide the Content-Length HTTP header.");
  if (Number(lengthHeader) > MAX_PUT_BYTES)
    throw new S3Error(400, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed size", [["ProposedSize", lengthHeader], ["MaxSizeAllowed", String(MAX_PUT_BYTES)]]);
  const body = await readBody(req, ctx, { toFile: true });
  const dir = bucketDir(ctx.bucket);
  const file = `${keyId(ctx.key)}.${crypto.randomBytes(6).toString("hex")}.data`;
  const headers = {};
  for (const h of STORED_HEADERS) if (req.headers[h] !== undefined) headers[h] = req.headers[h];
  const userMeta = {};
  const metaPrefix = OSS ? "x-oss-meta-" : "x-amz-meta-";
  for (const [k, v] of Object.entries(req.headers)) if (k.startsWith(metaPrefix)) userMeta[k] = v;
  const meta = {
    key: ctx.key,
    size: body.size,
    etag: body.md5,
    contentType: req.headers["content-type"] ?? (OSS ? "application/octet-stream" : "binary/octet-stream"),
    lastModified: Math.floor(Date.now() / 1000) * 1000,
    headers,
    userMeta,
    file,
  };
  await fsp.rename(body.file, path.join(dir, file));
  await saveMeta(ctx.bucket, meta);
  const old = bucket.objects.get(ctx.key);
  bucket.objects.set(ctx.key, meta);
  if (!old) bucket.sorted = null;
  if (old) await fsp.rm(path.join(dir, old.file), { force: true });
  const extra = {};
  if (req.headers["x-amz-checksum-crc32"]) extra["x-amz-checksum-crc32"] = req.headers["x-amz-checksum-crc32"];
  sendEmpty(ctx, 200, { etag: etagOf(meta), ...extra });
}

// CopyObject (S3) / CopyObject (OSS): PUT with x-amz-copy-source / x-oss-copy-source "/bucket/key"
// (percent-encoded; S3 also takes it without the leading '/'), within one bucket or across buckets.
// Conditions: x-amz-copy-source-if-match / -if-none-match (412 PreconditionFailed); OSS: the same
// x-oss- ones and x-oss-forbid-overwrite: true (409 FileAlreadyExists). x-*-metadata-directive COPY
// (the default: content type, stored headers and user metadata copied) or REPLACE (taken from the
// request). The data is copied, so the copy keeps the source's ETag. /__test__/quirks?copy_short=1
// makes copies one byte short (a server that copies wrong), for the callers' verification.
async function copyObject(ctx, destBucket) {
  const { req } = ctx;
  const p = OSS ? "x-oss-" : "x-amz-";
  await readBody(req, ctx, { toFile: false });
  let source = req.headers[`${p}copy-source`];
  if (source.includes("?")) throw notImplemented("CopyObject of a version");
  source = decodeComponent(source.replace(/^\//, ""));
  const slash = source.indexOf("/");
  if (slash <= 0 || slash + 1 >= source.length) throw new S3Error(400, "InvalidArgument", "Copy Source must mention the source bucket and key: sourcebucket/sourcekey");
  const srcBucketName = source.slice(0, slash);
  const srcKey = source.slice(slash + 1);
  const srcBucket = getBucket(srcBucketName);
  const meta = srcBucket.objects.get(srcKey);
  if (!meta) throw new S3Error(404, "NoSuchKey", "The specified key does not exist.");
  const ifMatch = req.headers[`${p}copy-source-if-match`];
  const ifNoneMatch = req.headers[`${p}copy-source-if-none-match`];
  if ((ifMatch !== undefined && !etagMatches(ifMatch, meta.etag)) || (ifNoneMatch !== undefined && etagMatches(ifNoneMatch, meta.etag)))
    throw new S3Error(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold", [["Condition", ifMatch !== undefined ? `${p}copy-source-if-match` : `${p}copy-source-if-none-match`]]);
  if (OSS && req.headers["x-oss-forbid-overwrite"] === "true" && destBucket.objects.has(ctx.key))
    throw new S3Error(409, "FileAlreadyExists", "The object you specified already exists and can not be overwritten.");
  const directive = (req.headers[`${p}metadata-directive`] ?? "COPY").toUpperCase();
  if (directive !== "COPY" && directive !== "REPLACE") throw new S3Error(400, "InvalidArgument", `Unknown metadata directive '${directive}'`);
  const dir = bucketDir(ctx.bucket);
  const file = `${keyId(ctx.key)}.${crypto.randomBytes(6).toString("hex")}.data`;
  let data = await fsp.readFile(path.join(bucketDir(srcBucketName), meta.file));
  if (quirks.copyShort && data.length > 0) data = data.subarray(0, data.length - 1);
  await writeFileAtomic(path.join(dir, file), data);
  let copied;
  if (directive === "COPY") copied = { contentType: meta.contentType, headers: { ...(meta.headers ?? {}) }, userMeta: { ...(meta.userMeta ?? {}) } };
  else {
    const headers = {};
    for (const h of STORED_HEADERS) if (req.headers[h] !== undefined) headers[h] = req.headers[h];
    const userMeta = {};
    for (const [k, v] of Object.entries(req.headers)) if (k.startsWith(`${p}meta-`)) userMeta[k] = v;
    copied = { contentType: req.headers["content-type"] ?? meta.contentType, headers, userMeta };
  }
  const dest = {
    key: ctx.key,
    size: data.length,
    etag: quirks.copyShort ? crypto.createHash("md5").update(data).digest("hex") : meta.etag,
    ...copied,
    lastModified: Math.floor(Date.now() / 1000) * 1000,
    file,
  };
  await saveMeta(ctx.bucket, dest);
  const old = destBucket.objects.get(ctx.key);
  destBucket.objects.set(ctx.key, dest);
  if (!old) destBucket.sorted = null;
  if (old && old.file !== file) await fsp.rm(path.join(dir, old.file), { force: true });
  const result = OSS ? "CopyObjectResult" : `CopyObjectResult xmlns="${XMLNS}"`;
  sendXml(ctx, 200, `<${result}>${xmlElement("LastModified", new Date(dest.lastModified).toISOString())}${xmlElement("ETag", etagOf(dest))}</CopyObjectResult>`);
}

function etagMatches(header, etag) {
  return header.split(",").some((t) => {
    t = t.trim();
    const tag = t.replace(/^W\//, "").replace(/^"|"$/g, "");
    return t === "*" || (OSS ? tag.toLowerCase() : tag) === etag;
  });
}

// 412 or 304 per If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since (RFC 7232 order).
function checkConditions(ctx, meta) {
  const h = ctx.req.headers;
  const lm = meta.lastModified;
  if (h["if-match"] !== undefined) {
    if (!etagMatches(h["if-match"], meta.etag)) throw new S3Error(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold", [["Condition", "If-Match"]]);
  } else if (h["if-unmodified-since"] !== undefined) {
    const t = Date.parse(h["if-unmodified-since"]);
    if (!Number.isNaN(t) && lm > t) throw new S3Error(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold", [["Condition", "If-Unmodified-Since"]]);
  }
  if (h["if-none-match"] !== undefined) {
    if (etagMatches(h["if-none-match"], meta.etag)) return 304;
  } else if (h["if-modified-since"] !== undefined) {
    const t = Date.parse(h["if-modified-since"]);
    if (!Number.isNaN(t) && lm <= t) return 304;
  }
  return 0;
}

// null: whole object; { start, end }: inclusive byte range. Only one range, as S3.
function parseRange(header, size) {
  if (header === undefined) return null;
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!m || (m[1] === "" && m[2] === "")) return null; // S3 ignores a Range it cannot parse
  let start;
  let end;
  if (m[1] === "") {
    const n = Number(m[2]);
    if (n === 0) throw Object.assign(new S3Error(416, "InvalidRange", "The requested range is not satisfiable", [["RangeRequested", header], ["ActualObjectSize", String(size)]]), { size });
    start = Math.max(0, size - n);
    end = size - 1;
  } else {
    start = Number(m[1]);
    end = m[2] === "" ? size - 1 : Math.min(Number(m[2]), size - 1);
    if (m[2] !== "" && Number(m[2]) < start) return null;
  }
  if (start >= size) throw Object.assign(new S3Error(416, "InvalidRange", "The requested range is not satisfiable", [["RangeRequested", header], ["ActualObjectSize", String(size)]]), { size });
  return { start, end };
}

async function getObject(ctx, head) {
  const bucket = getBucket(ctx.bucket);
  await readBody(ctx.req, ctx, { toFile: false });
  const meta = bucket.objects.get(ctx.key);
  if (!meta) throw new S3Error(404, "NoSuchKey", "The specified key does not exist.");
  const headers = objectHeaders(meta);
  const notModified = checkConditions(ctx, meta);
  if (notModified) {
    ctx.status = 304;
    ctx.res.writeHead(304, { ...baseHeaders(ctx), etag: headers.etag, "last-modified": headers["last-modified"] });
    ctx.res.end();
    return;
  }
  if (!head) {
    for (const [param, header] of Object.entries(RESPONSE_OVERRIDES)) {
      const v = single(ctx.query, param);
      if (v !== undefined) headers[header] = v;
    }
  }
  const range = head ? null : parseRange(ctx.req.headers.range, meta.size);
  const file = path.join(bucketDir(ctx.bucket), meta.file);
  let status = 200;
  if (range) {
    status = 206;
    headers["content-range"] = `bytes ${range.start}-${range.end}/${meta.size}`;
    headers["content-length"] = range.end - range.start + 1;
  } else headers["content-length"] = meta.size;
  ctx.status = status;
  if (head || meta.size === 0) {
    ctx.res.writeHead(status, { ...baseHeaders(ctx), ...headers });
    ctx.res.end();
    return;
  }
  // Opened before the headers go out: a concurrent replace may unlink the file, but not this descriptor.
  const fh = await fsp.open(file, "r");
  if (!range && takeCorruption(ctx)) {
    // /__test__/corrupt: the whole body with one byte flipped in its middle, as if changed on the way;
    // the object at rest is untouched.
    const data = await fh.readFile();
    await fh.close();
    data[Math.floor(data.length / 2)] ^= 0xff;
    ctx.res.writeHead(status, { ...baseHeaders(ctx), ...headers });
    ctx.res.end(data);
    return;
  }
  if (ctx.cutAfter !== undefined) {
    // /__test__/cut: the full Content-Length announced, then the connection breaks after cutAfter bytes.
    const start = range ? range.start : 0;
    const end = Math.min(range ? range.end : meta.size - 1, start + ctx.cutAfter - 1);
    ctx.res.writeHead(status, { ...baseHeaders(ctx), ...headers });
    ctx.res.flushHeaders();
    if (end >= start) {
      for await (const chunk of fh.createReadStream({ start, end })) await new Promise((resolve) => ctx.res.write(chunk, resolve));
    } else await fh.close();
    process.stdout.write(`${new Date().toISOString()} GET ${ctx.req.url} cut after ${end - start + 1} body bytes (/__test__/cut)\n`);
    ctx.res.socket?.destroy();
    return;
  }
  const stream = fh.createReadStream(range ? { start: range.start, end: range.end } : {});
  ctx.res.writeHead(status, { ...baseHeaders(ctx), ...headers });
  stream.pipe(ctx.res);
  await once(stream, "close");
}

// ---------------------------------------------------------------------------------------------------
// Listing

function encodeKeyForUrl(s) {
  return awsUriEncode(s, true);
}

function makeToken(kind, value) {
  return Buffer.from(JSON.stringify([kind, value]), "utf8").toString("base64");
}

function parseToken(token) {
  try {
    const [kind, value] = JSON.parse(Buffer.from(token, "base64").toString("utf8"));
    if ((kind === "k" || kind === "p") && typeof value === "string") return { kind, value };
  } catch {}
  throw new S3Error(400, "InvalidArgument", "The continuation token provided is incorrect", [["ArgumentName", "continuation-token"]]);
}

// Walks the bucket in UTF-8 order after `after` (exclusive; when afterPrefix, also skipping everything
// under that common prefix). Returns up to maxKeys entries and whether more would follow.
function listEntries(bucket, { prefix, delimiter, after, afterPrefix, maxKeys }) {
  const keys = sortedKeys(bucket);
  const contents = [];
  const prefixes = [];
  if (maxKeys === 0) return { contents, prefixes, truncated: false, lastItem: null };
  let truncated = false;
  let lastPrefix = afterPrefix ? after : null;
  let lastItem = null;
  for (const key of keys) {
    if (!key.startsWith(prefix)) continue;
    if (after !== null && utf8Compare(key, after) <= 0) continue;
    if (lastPrefix !== null && key.startsWith(lastPrefix)) continue;
    let cp = null;
    if (delimiter) {
      const i = key.indexOf(delimiter, prefix.length);
      if (i >= 0) cp = key.slice(0, i + delimiter.length);
    }
    if (contents.length + prefixes.length >= maxKeys) {
      truncated = true;
      break;
    }
    if (cp !== null) {
      prefixes.push(cp);
      lastPrefix = cp;
      lastItem = { kind: "p", value: cp };
    } else {
      contents.push(bucket.objects.get(key));
      lastItem = { kind: "k", value: key };
    }
  }
  return { contents, prefixes, truncated, lastItem };
}

function listMaxKeys(query) {
  const v = single(query, "max-keys");
  if (v === undefined) return CONFIG.maxKeys;
  if (!/^\d+$/.test(v)) throw new S3Error(400, "InvalidArgument", "Provided max-keys not an integer or within integer range", [["ArgumentName", "max-keys"], ["ArgumentValue", v]]);
  return Math.min(Number(v), CONFIG.maxKeys);
}

function contentsXml(meta, enc, owner = false) {
  return (
    "<Contents>" +
    xmlElement("Key", enc(meta.key)) +
    xmlElement("LastModified", new Date(meta.lastModified).toISOString()) +
    xmlElement("ETag", etagOf(meta)) +
    (OSS ? xmlElement("Type", "Normal") : "") +
    xmlElement("Size", meta.size) +
    xmlElement("StorageClass", OSS ? "Standard" : "STANDARD") +
    (owner ? `<Owner>${xmlElement("ID", "scopebox")}${xmlElement("DisplayName", "scopebox")}</Owner>` : "") +
    "</Contents>"
  );
}

async function listObjects(ctx) {
  const bucket = getBucket(ctx.bucket);
  await readBody(ctx.req, ctx, { toFile: false });
  const q = ctx.query;
  const v2 = single(q, "list-type") === "2";
  if (q["list-type"] !== undefined && !v2) throw new S3Error(400, "InvalidArgument", "Invalid list type", [["ArgumentName", "list-type"]]);
  const prefix = single(q, "prefix") ?? "";
  const delimiter = single(q, "delimiter") ?? "";
  let encodingType = single(q, "encoding-type");
  if (encodingType !== undefined && encodingType !== "url")
    throw new S3Error(400, "InvalidArgument", "Invalid Encoding Method specified in Request", [["ArgumentName", "encoding-type"]]);
  // /__test__/quirks: an S3-compatible server that accepts the parameter and sends plain keys anyway.
  if (quirks.ignoreEncodingType) encodingType = undefined;
  const enc = encodingType === "url" ? encodeKeyForUrl : (s) => s;
  const maxKeys = listMaxKeys(q);
  const requestedMaxKeys = single(q, "max-keys") ?? String(CONFIG.maxKeys);
  let after = null;
  let afterPrefix = false;
  // OSS: no namespace; Owner in v1 listings always, in v2 with fetch-owner=true (ali-oss's list() needs it).
  const owner = OSS && (!v2 || single(q, "fetch-owner") === "true");
  let body = `<ListBucketResult${OSS ? "" : ` xmlns="${XMLNS}"`}>${xmlElement("Name", ctx.bucket)}${xmlElement("Prefix", enc(prefix))}`;
  if (v2) {
    const token = single(q, "continuation-token");
    const startAfter = single(q, "start-after");
    if (token !== undefined) {
      const t = parseToken(token);
      after = t.value;
      afterPrefix = t.kind === "p";
    } else if (startAfter !== undefined && startAfter !== "") after = startAfter;
    const r = listEntries(bucket, { prefix, delimiter, after, afterPrefix, maxKeys });
    if (token !== undefined) body += xmlElement("ContinuationToken", token);
    if (startAfter !== undefined) body += xmlElement("StartAfter", enc(startAfter));
    body += xmlElement("KeyCount", r.contents.length + r.prefixes.length) + xmlElement("MaxKeys", requestedMaxKeys);
    if (delimiter) body += xmlElement("Delimiter", enc(delimiter));
    if (encodingType) body += xmlElement("EncodingType", encodingType);
    body += xmlElement("IsTruncated", r.truncated);
    if (r.truncated) body += xmlElement("NextContinuationToken", makeToken(r.lastItem.kind, r.lastItem.value));
    for (const m of r.contents) body += contentsXml(m, enc, owner);
    for (const p of r.prefixes) body += `<CommonPrefixes>${xmlElement("Prefix", enc(p))}</CommonPrefixes>`;
  } else {
    const marker = single(q, "marker") ?? "";
    if (marker !== "") after = marker;
    // v1 markers are keys; a marker equal to a common prefix skips that prefix, as in S3.
    afterPrefix = delimiter !== "" && marker.endsWith(delimiter);
    const r = listEntries(bucket, { prefix, delimiter, after, afterPrefix, maxKeys });
    body += xmlElement("Marker", enc(marker));
    if (r.truncated && delimiter) body += xmlElement("NextMarker", enc(r.lastItem.value));
    body += xmlElement("MaxKeys", requestedMaxKeys);
    if (delimiter) body += xmlElement("Delimiter", enc(delimiter));
    if (encodingType) body += xmlElement("EncodingType", encodingType);
    body += xmlElement("IsTruncated", r.truncated);
    for (const m of r.contents) body += contentsXml(m, enc, owner);
    for (const p of r.prefixes) body += `<CommonPrefixes>${xmlElement("Prefix", enc(p))}</CommonPrefixes>`;
  }
  body += "</ListBucketResult>";
  sendXml(ctx, 200, body);
}

async function deleteObjects(ctx) {
  getBucket(ctx.bucket);
  const h = ctx.req.headers;
  if (h["content-md5"] === undefined && !Object.keys(h).some((k) => k.startsWith("x-amz-checksum-")))
    throw new S3Error(400, "InvalidRequest", "Missing required header for this request: Content-MD5 OR x-amz-checksum-*");
  const { buffer } = await readBody(ctx.req, ctx, { toFile: false });
  const xml = buffer.toString("utf8");
  if (!/<Delete[\s>]/.test(xml) || !/<\/Delete>\s*$/.test(xml))
    throw new S3Error(400, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema");
  const quiet = /<Quiet>\s*true\s*<\/Quiet>/i.test(xml);
  const keys = [];
  for (const m of xml.matchAll(/<Object>([\s\S]*?)<\/Object>/g)) {
    const k = /<Key>([\s\S]*?)<\/Key>/.exec(m[1]);
    if (!k) throw new S3Error(400, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema");
    keys.push(xmlUnescape(k[1]));
  }
  if (keys.length === 0 || keys.length > 1000)
    throw new S3Error(400, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema");
  let body = `<DeleteResult xmlns="${XMLNS}">`;
  for (const key of keys) {
    await deleteObject(ctx.bucket, key);
    if (!quiet) body += `<Deleted>${xmlElement("Key", key)}</Deleted>`;
  }
  body += "</DeleteResult>";
  sendXml(ctx, 200, body);
}

// ---------------------------------------------------------------------------------------------------
// Bucket operations

async function createBucket(ctx) {
  await readBody(ctx.req, ctx, { toFile: false });
  if (!validBucketName(ctx.bucket)) throw new S3Error(400, "InvalidBucketName", "The specified bucket is not valid.", [["BucketName", ctx.bucket]]);
  if (!buckets.has(ctx.bucket)) {
    await fsp.mkdir(bucketDir(ctx.bucket), { recursive: true });
    buckets.set(ctx.bucket, { objects: new Map(), sorted: null });
  }
  // us-east-1 answers 200 for a bucket the caller already owns.
  sendEmpty(ctx, 200, { location: `/${ctx.bucket}` });
}

async function deleteBucket(ctx) {
  const bucket = getBucket(ctx.bucket);
  await readBody(ctx.req, ctx, { toFile: false });
  if (bucket.objects.size) throw new S3Error(409, "BucketNotEmpty", "The bucket you tried to delete is not empty");
  buckets.delete(ctx.bucket);
  await fsp.rm(bucketDir(ctx.bucket), { recursive: true, force: true });
  sendEmpty(ctx, 204);
}

async function listBuckets(ctx) {
  await readBody(ctx.req, ctx, { toFile: false });
  let body = `<ListAllMyBucketsResult xmlns="${XMLNS}"><Owner>${xmlElement("ID", "scopebox")}${xmlElement("DisplayName", "scopebox")}</Owner><Buckets>`;
  for (const name of [...buckets.keys()].sort())
    body += `<Bucket>${xmlElement("Name", name)}${xmlElement("CreationDate", "2024-01-01T00:00:00.000Z")}</Bucket>`;
  body += "</Buckets></ListAllMyBucketsResult>";
  sendXml(ctx, 200, body);
}

// ---------------------------------------------------------------------------------------------------
// Routing

const UNSUPPORTED_SUBRESOURCES = [
  "acl", "analytics", "accelerate", "attributes", "cors", "encryption", "intelligent-tiering", "inventory",
  "legal-hold", "lifecycle", "logging", "metrics", "notification", "object-lock", "ownershipControls",
  "partNumber", "policy", "policyStatus", "publicAccessBlock", "replication", "requestPayment", "restore",
  "retention", "select", "tagging", "torrent", "uploadId", "uploads", "versionId", "versioning", "versions", "website",
];

async function route(ctx) {
  const { req, query } = ctx;
  const method = req.method;
  const sub = UNSUPPORTED_SUBRESOURCES.find((s) => Object.hasOwn(query, s));
  if (ctx.bucket === undefined) {
    if (method === "GET") return listBuckets(ctx);
    throw new S3Error(405, "MethodNotAllowed", "The specified method is not allowed against this resource.", [["Method", method], ["ResourceType", "SERVICE"]]);
  }
  if (ctx.key === undefined) {
    if (sub) throw notImplemented(`bucket subresource '?${sub}'`);
    if (method === "GET" && Object.hasOwn(query, "location")) {
      getBucket(ctx.bucket);
      await readBody(req, ctx, { toFile: false });
      return sendXml(ctx, 200, `<LocationConstraint xmlns="${XMLNS}"></LocationConstraint>`);
    }
    if (method === "GET") return listObjects(ctx);
    if (method === "HEAD") {
      getBucket(ctx.bucket);
      await readBody(req, ctx, { toFile: false });
      return sendEmpty(ctx, 200, { "x-amz-bucket-region": CONFIG.region });
    }
    if (method === "POST" && Object.hasOwn(query, "delete")) return deleteObjects(ctx);
    if (method === "PUT") return createBucket(ctx);
    if (method === "DELETE") return deleteBucket(ctx);
    throw new S3Error(405, "MethodNotAllowed", "The specified method is not allowed against this resource.", [["Method", method], ["ResourceType", "BUCKET"]]);
  }
  if (sub) throw notImplemented(`object subresource '?${sub}'`);
  switch (method) {
    case "PUT":
      return putObject(ctx);
    case "GET":
      return getObject(ctx, false);
    case "HEAD":
      return getObject(ctx, true);
    case "DELETE":
      getBucket(ctx.bucket);
      await readBody(req, ctx, { toFile: false });
      await deleteObject(ctx.bucket, ctx.key);
      return sendEmpty(ctx, 204);
    default:
      throw new S3Error(405, "MethodNotAllowed", "The specified method is not allowed against this resource.", [["Method", method], ["ResourceType", "OBJECT"]]);
  }
}

// ---------------------------------------------------------------------------------------------------
// Test hooks: unsigned, only from loopback peers, under /__test__/ (no valid bucket name starts with '_').

const requestLog = [];
const HOOK_BODY_MAX = 1 << 20;
const REQUEST_LOG_MAX = 5000;
let failures = []; // [{ remaining, status, code, method, bucket }]
let cuts = []; // [{ remaining, after, method, bucket }]
let corruptions = []; // [{ remaining, bucket }]
const quirks = { ignoreEncodingType: false, copyShort: false };

function isLoopback(addr) {
  return addr === "127.0.0.1" || addr === "::1" || addr === "::ffff:127.0.0.1" || /^(::ffff:)?127\./.test(addr ?? "");
}

function intParam(q, name, { required = false, min = -Infinity } = {}) {
  const v = single(q, name);
  if (v === undefined) {
    if (required) throw new Error(`missing parameter '${name}'`);
    return undefined;
  }
  if (!/^-?\d+$/.test(v) || Number(v) < min) throw new Error(`bad integer '${name}=${v}'`);
  return Number(v);
}

async function hooks(ctx, sub) {
  const { req, query } = ctx;
  ctx.auth = "hook";
  if (!isLoopback(req.socket.remoteAddress)) return sendJson(ctx, 403, { error: "test hooks answer loopback peers only" });
  if (!CONFIG.hooks) return sendJson(ctx, 404, { error: "test hooks are disabled (S3_TEST_HOOKS=0)" });
  const chunks = [];
  let received = 0;
  for await (const chunk of req) {
    received += chunk.length;
    if (received <= HOOK_BODY_MAX) chunks.push(chunk);
  }
  ctx.bodyDone = true;
  if (received > HOOK_BODY_MAX) return sendJson(ctx, 413, { error: `hook bodies are at most ${HOOK_BODY_MAX} bytes` });
  try {
    if (sub === "health" && req.method === "GET")
      return sendJson(ctx, 200, { ok: true, provider: CONFIG.provider, pid: process.pid, port: CONFIG.port, region: CONFIG.region, buckets: [...buckets.keys()], access_key: CONFIG.accessKey });
    if (sub === "age" && req.method === "POST") {
      const bucketName = single(query, "bucket");
      const bucket = buckets.get(bucketName);
      if (!bucket) return sendJson(ctx, 404, { error: `no bucket '${bucketName}'` });
      const key = single(query, "key");
      const prefix = single(query, "prefix");
      if ((key === undefined) === (prefix === undefined)) throw new Error("give exactly one of 'key' and 'prefix'");
      let when;
      const at = single(query, "at");
      if (at !== undefined) {
        when = /^\d+$/.test(at) ? Number(at) * 1000 : Date.parse(at);
        if (Number.isNaN(when)) throw new Error(`bad 'at=${at}' (ISO 8601 or Unix seconds)`);
      } else when = Date.now() - intParam(query, "seconds", { required: true, min: 0 }) * 1000;
      when = Math.floor(when / 1000) * 1000;
      const keys = key !== undefined ? [key] : sortedKeys(bucket).filter((k) => k.startsWith(prefix));
      const aged = [];
      for (const k of keys) {
        const meta = bucket.objects.get(k);
        if (!meta) return sendJson(ctx, 404, { error: `no key '${k}' in bucket '${bucketName}'` });
        meta.lastModified = when;
        await saveMeta(bucketName, meta);
        aged.push(k);
      }
      return sendJson(ctx, 200, { last_modified: new Date(when).toISOString(), keys: aged });
    }
    if (sub === "fail" && req.method === "POST") {
      const f = {
        remaining: intParam(query, "count", { min: 1 }) ?? 1,
        status: intParam(query, "status", { min: 400 }) ?? 503,
        code: single(query, "code"),
        method: single(query, "method")?.toUpperCase(),
        bucket: single(query, "bucket"),
      };
      f.code ??= f.status === 503 ? "SlowDown" : f.status === 500 ? "InternalError" : "ServiceUnavailable";
      failures.push(f);
      return sendJson(ctx, 200, { queued: f });
    }
    if (sub === "fail" && req.method === "DELETE") {
      failures = [];
      return sendJson(ctx, 200, { queued: [] });
    }
    if (sub === "cut" && req.method === "POST") {
      const c = {
        remaining: intParam(query, "count", { min: 1 }) ?? 1,
        after: intParam(query, "after", { min: 0 }) ?? 0,
        method: single(query, "method")?.toUpperCase() ?? "PUT",
        bucket: single(query, "bucket"),
      };
      cuts.push(c);
      return sendJson(ctx, 200, { queued: c });
    }
    if (sub === "cut" && req.method === "DELETE") {
      cuts = [];
      return sendJson(ctx, 200, { queued: [] });
    }
    if (sub === "corrupt" && req.method === "POST") {
      const c = { remaining: intParam(query, "count", { min: 1 }) ?? 1, bucket: single(query, "bucket") };
      corruptions.push(c);
      return sendJson(ctx, 200, { queued: c });
    }
    if (sub === "corrupt" && req.method === "DELETE") {
      corruptions = [];
      return sendJson(ctx, 200, { queued: [] });
    }
    if (sub === "object" && req.method === "PUT") {
      // Any key, unsigned: names a signing client would refuse to make (control characters).
      const bucketName = single(query, "bucket");
      const bucket = buckets.get(bucketName);
      if (!bucket) return sendJson(ctx, 404, { error: `no bucket '${bucketName}'` });
      const key = single(query, "key");
      if (!key || Buffer.byteLength(key, "utf8") > 1024) throw new Error("'key' must be 1 to 1024 bytes");
      const data = Buffer.concat(chunks);
      const file = `${keyId(key)}.${crypto.randomBytes(6).toString("hex")}.data`;
      await writeFileAtomic(path.join(bucketDir(bucketName), file), data);
      const meta = {
        key,
        size: data.length,
        etag: crypto.createHash("md5").update(data).digest("hex"),
        contentType: OSS ? "application/octet-stream" : "binary/octet-stream",
        lastModified: Math.floor(Date.now() / 1000) * 1000,
        headers: {},
        userMeta: {},
        file,
      };
      await saveMeta(bucketName, meta);
      const old = bucket.objects.get(key);
      bucket.objects.set(key, meta);
      if (old) await fsp.rm(path.join(bucketDir(bucketName), old.file), { force: true });
      else bucket.sorted = null;
      return sendJson(ctx, 200, { key, size: data.length });
    }
    if (sub === "quirks" && req.method === "POST") {
      for (const [param, field] of [["ignore_encoding_type", "ignoreEncodingType"], ["copy_short", "copyShort"]]) {
        const v = single(query, param);
        if (v !== undefined && v !== "0" && v !== "1") throw new Error(`bad '${param}=${v}' (0 or 1)`);
        if (v !== undefined) quirks[field] = v === "1";
      }
      return sendJson(ctx, 200, { ignore_encoding_type: quirks.ignoreEncodingType, copy_short: quirks.copyShort });
    }
    if (sub === "log" && req.method === "GET") return sendJson(ctx, 200, requestLog);
    if (sub === "log" && req.method === "DELETE") {
      requestLog.length = 0;
      return sendJson(ctx, 200, []);
    }
    return sendJson(ctx, 404, { error: `no test hook '${req.method} /__test__/${sub}'` });
  } catch (e) {
    return sendJson(ctx, 400, { error: e.message });
  }
}

// The byte count after which this request's body (a GET: the response's) is cut (a /__test__/cut of its
// method and bucket), or undefined.
function takeCut(ctx) {
  if (ctx.req.method !== "GET" && ctx.bodyDone) return undefined; // no request body to cut
  const c = cuts.find((c) => c.method === ctx.req.method && (!c.bucket || c.bucket === ctx.bucket));
  if (!c) return undefined;
  if (--c.remaining <= 0) cuts = cuts.filter((x) => x !== c);
  return c.after;
}

// Whether this GET's body is to be corrupted on the way (a /__test__/corrupt of its bucket).
function takeCorruption(ctx) {
  const c = corruptions.find((c) => !c.bucket || c.bucket === ctx.bucket);
  if (!c) return false;
  if (--c.remaining <= 0) corruptions = corruptions.filter((x) => x !== c);
  return true;
}

function takeFailure(ctx) {
  const f = failures.find((f) => (!f.method || f.method === ctx.req.method) && (!f.bucket || f.bucket === ctx.bucket));
  if (!f) return null;
  if (--f.remaining <= 0) failures = failures.filter((x) => x !== f);
  const message = f.code === "SlowDown" ? "Please reduce your request rate." : "scopebox test server: injected failure (/__test__/fail)";
  return new S3Error(f.status, f.code, message);
}

// ---------------------------------------------------------------------------------------------------

function logRequest(ctx) {
  const entry = {
    time: new Date(ctx.start).toISOString(),
    method: ctx.req.method,
    url: ctx.req.url,
    bucket: ctx.bucket ?? null,
    key: ctx.key ?? null,
    status: ctx.status ?? 0,
    code: ctx.code ?? null,
    auth: ctx.auth ?? null,
    content_sha256: ctx.payloadHash ?? null,
    ms: Date.now() - ctx.start,
  };
  if (ctx.auth !== "hook") {
    requestLog.push(entry);
    if (requestLog.length > REQUEST_LOG_MAX) requestLog.splice(0, requestLog.length - REQUEST_LOG_MAX);
  }
  process.stdout.write(`${entry.time} ${entry.method} ${entry.url} ${entry.status}${entry.code ? ` ${entry.code}` : ""} ${entry.auth ?? "-"} ${entry.ms}ms\n`);
  if (ctx.error?.code === "SignatureDoesNotMatch" && OSS) {
    const sts = ctx.error.extra.find(([k]) => k === "StringToSign")?.[1] ?? "";
    process.stdout.write(`  string to sign:\n    ${sts.split("\n").join("\n    ")}\n`);
  } else if (ctx.error?.code === "SignatureDoesNotMatch") {
    const get = (n) => ctx.error.extra.find(([k]) => k === n)?.[1] ?? "";
    process.stdout.write(`  canonical request:\n    ${get("CanonicalRequest").split("\n").join("\n    ")}\n  string to sign:\n    ${get("StringToSign").split("\n").join("\n    ")}\n`);
  }
}

async function handle(req, res, expectContinue) {
  // No Content-Length and no Transfer-Encoding: no body, nothing left unread on the connection.
  const bodyless = req.headers["transfer-encoding"] === undefined && (req.headers["content-length"] ?? "0") === "0";
  const ctx = { req, res, expectContinue, requestId: newRequestId(), start: Date.now(), bodyDone: bodyless };
  res.on("finish", () => logRequest(ctx));
  try {
    const q = req.url.indexOf("?");
    const rawPath = q < 0 ? req.url : req.url.slice(0, q);
    if (!rawPath.startsWith("/")) throw new S3Error(400, "InvalidURI", "Couldn't parse the specified URI.");
    if (rawPath.startsWith("/__test__/")) {
      ctx.query = parseQuery(q < 0 ? "" : req.url.slice(q + 1));
      return await hooks(ctx, rawPath.slice("/__test__/".length));
    }
    const decodedPath = decodeComponent(rawPath);
    ctx.canonicalPath = awsUriEncode(decodedPath, true);
    ctx.query = parseQuery(q < 0 ? "" : req.url.slice(q + 1));
    const vhostBucket = OSS ? ossBucketFromHost(req.headers.host, buckets) : null;
    if (vhostBucket !== null) {
      // OSS virtual-hosted: Host "<bucket>.<endpoint>", the whole path is the key.
      ctx.bucket = vhostBucket;
      if (decodedPath.length > 1) ctx.key = decodedPath.slice(1);
    } else {
      const slash = decodedPath.indexOf("/", 1);
      const bucket = slash < 0 ? decodedPath.slice(1) : decodedPath.slice(1, slash);
      if (bucket !== "") ctx.bucket = bucket;
      if (slash >= 0 && slash + 1 < decodedPath.length) ctx.key = decodedPath.slice(slash + 1);
    }
    if (ctx.key !== undefined && Buffer.byteLength(ctx.key, "utf8") > 1024)
      throw new S3Error(400, "KeyTooLongError", "Your key is too long", [["MaxSizeAllowed", "1024"], ["Size", String(Buffer.byteLength(ctx.key, "utf8"))]]);
    const failure = takeFailure(ctx);
    if (failure) throw failure;
    ctx.cutAfter = takeCut(ctx);
    await authenticate(ctx);
    await route(ctx);
  } catch (e) {
    if (!(e instanceof S3Error)) {
      if (req.destroyed || req.aborted || e?.code === "ECONNRESET") return; // client went away
      console.error(e);
      e = new S3Error(500, "InternalError", `We encountered an internal error. Please try again. (${e?.message ?? e})`);
    }
    ctx.error = e;
    if (res.headersSent) {
      res.destroy();
      return;
    }
    sendError(ctx, e);
  }
}

await loadStorage();
const server = http.createServer({ keepAliveTimeout: 5000 });
server.on("request", (req, res) => handle(req, res, false));
// Answer "Expect: 100-continue" only once the request is authenticated, as S3 does.
server.on("checkContinue", (req, res) => handle(req, res, true));
server.on("clientError", (err, socket) => {
  if (socket.writable) socket.end("HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
});
server.on("error", (e) => {
  console.error(`server.mjs: ${e.message}`);
  process.exit(1);
});
server.listen(CONFIG.port, CONFIG.host, async () => {
  CONFIG.port = server.address().port;
  await writeFileAtomic(path.join(CONFIG.dataDir, "port"), `${CONFIG.port}\n`);
  console.log(
    `s3server: listening on http://${CONFIG.host}:${CONFIG.port} (pid ${process.pid}, ${OSS ? "Aliyun OSS mode (V1 signatures)" : `region ${CONFIG.region}`}, ` +
      `access key ${CONFIG.accessKey}, buckets ${[...buckets.keys()].join(",") || "none"}, test hooks ${CONFIG.hooks ? "on" : "off"}` +
      `${CONFIG.fixedNow !== null ? `, signature clock fixed at ${new Date(CONFIG.fixedNow).toISOString()}` : ""})`,
  );
});

for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, () => {
    server.close();
    server.closeAllConnections();
    process.exit(0);
  });
}
