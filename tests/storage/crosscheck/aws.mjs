#!/usr/bin/env node
// SPDX-License-Identifier: LGPL-2.1-or-later
// Prints what the official AWS SDK for JavaScript v3 signs for the "s3" and "sigv4" cases of cases.json:
// header-signed requests as @aws-sdk/client-s3 sends them, URLs from @aws-sdk/s3-request-presigner,
// and generic requests signed by @smithy/signature-v4 directly.
import { emit, installFixedClock, loadCases, pairsToObject } from "./common.mjs";

const cases = loadCases(process.argv[2]);
const now = installFixedClock(cases.now);

const s3 = await import("@aws-sdk/client-s3");
const { getSignedUrl } = await import("@aws-sdk/s3-request-presigner");
const { buildQueryString } = await import("@smithy/core/protocols");
const { SignatureV4 } = await import("@smithy/signature-v4");
const { HttpRequest } = await import("@smithy/protocol-http");
const { Sha256 } = await import("@aws-crypto/sha256-js");
const { Hash } = await import("@smithy/hash-node");

class Captured extends Error {}

// Headers the SDK adds for telemetry and retries; random or version-dependent, and not something the
// storage agent sends. Removed before the signing middleware runs.
const TELEMETRY = /^(user-agent|x-amz-user-agent|amz-sdk-invocation-id|amz-sdk-request)$/i;

function makeClient(c, onRequest) {
  const client = new s3.S3Client({
    region: c.region,
    endpoint: c.endpoint,
    forcePathStyle: c.forcePathStyle ?? false,
    credentials: cases.s3_credentials,
    // Since 3.729 the client adds CRC32 checksums (x-amz-checksum-*, x-amz-sdk-checksum-algorithm and
    // x-amz-checksum-mode) wherever an operation supports them, presigned URLs included. The storage
    // agent does not use flexible checksums; this keeps them to the operations that require them.
    requestChecksumCalculation: "WHEN_REQUIRED",
    responseChecksumValidation: "WHEN_REQUIRED",
    maxAttempts: 1,
    // Quiet: PutObject without a body (presigning) makes the client warn about streams of unknown length.
    logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {} },
    requestHandler: {
      handle: async (request) => {
        onRequest(request);
        throw new Captured();
      },
    },
  });
  client.middlewareStack.addRelativeTo(
    (next) => async (args) => {
      for (const h of Object.keys(args.request.headers)) if (TELEMETRY.test(h)) delete args.request.headers[h];
      return next(args);
    },
    { relation: "before", toMiddleware: "httpSigningMiddleware", name: "crosscheckStripTelemetry" },
  );
  return client;
}

function command(sdk) {
  const Command = s3[`${sdk.command}Command`];
  if (!Command) throw new Error(`unknown command ${sdk.command}`);
  return new Command(structuredClone(sdk.input));
}

function requestUrl(r) {
  const q = r.query && Object.keys(r.query).length ? `?${buildQueryString(r.query)}` : "";
  return `${r.protocol}//${r.hostname}${r.port ? `:${r.port}` : ""}${r.path}${q}`;
}

async function s3Case(c) {
  if (c.mode === "header") {
    let req;
    try {
      await makeClient(c.client, (r) => (req = r)).send(command(c.sdk));
    } catch (e) {
      if (!(e instanceof Captured)) throw e;
    }
    if (process.env.CROSSCHECK_DEBUG) console.error(c.id, req.method, JSON.stringify(req.headers));
    emit(c.id, "url", requestUrl(req));
    emit(c.id, "authorization", req.headers.authorization);
    emit(c.id, "x-amz-date", req.headers["x-amz-date"]);
    emit(c.id, "x-amz-content-sha256", req.headers["x-amz-content-sha256"]);
  } else if (c.mode === "presign") {
    const client = makeClient(c.client, () => {});
    const url = await getSignedUrl(client, command(c.sdk), {
      expiresIn: c.expires,
      signingDate: new Date(now),
      ...(c.signableHeaders ? { signableHeaders: new Set(c.signableHeaders) } : {}),
    });
    emit(c.id, "url", url);
  } else throw new Error(`${c.id}: unknown mode ${c.mode}`);
}

async function sigv4Case(c) {
  const creds = c.credentials === "suite" ? cases.suite_credentials : cases.s3_credentials;
  const signer = new SignatureV4({
    credentials: creds,
    region: c.region,
    service: c.service,
    sha256: c.sha256 === "hash-node" ? Hash.bind(null, "sha256") : Sha256,
    // true: the SDK normalizes and encodes the path (every service but S3); false: signs it as given.
    uriEscapePath: c.normalize,
    applyChecksum: false,
  });
  const request = new HttpRequest({
    method: c.method,
    protocol: "https:",
    hostname: c.host,
    path: c.sdkPath ?? c.path,
    query: pairsToObject(c.query),
    headers: { host: c.host, ...pairsToObject(c.headers) },
    body: c.body,
  });
  if (c.mode === "sign") {
    const signed = await signer.sign(request, { signingDate: new Date(now) });
    emit(c.id, "authorization", signed.headers.authorization);
  } else if (c.mode === "presign") {
    if (c.payload === "unsigned") request.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD";
    const signed = await signer.presign(request, {
      signingDate: new Date(now),
      expiresIn: c.expires,
      // Sign the payload header without hoisting it into the query, as S3 presigning does not either.
      unsignableHeaders: new Set(["x-amz-content-sha256"]),
      unhoistableHeaders: new Set(["x-amz-content-sha256"]),
    });
    emit(c.id, "query", buildQueryString(signed.query));
  } else throw new Error(`${c.id}: unknown mode ${c.mode}`);
}

for (const c of cases.sigv4 ?? []) await sigv4Case(c);
for (const c of cases.s3 ?? []) await s3Case(c);
