// SPDX-License-Identifier: LGPL-2.1-or-later
// Aliyun OSS mode of server.mjs (S3_TEST_PROVIDER=oss, "run start-oss"): verification of OSS version 1
// signatures (Authorization: OSS <AccessKeyId>:<Signature>, and signed URLs with OSSAccessKeyId, Expires,
// Signature), recomputed with the string-to-sign builder of the official SDK, ali-oss (pinned in
// package-lock.json, same version as ../crosscheck), and refused with OSS's status, code and XML body.
import signUtils from "ali-oss/lib/common/signUtils.js";

export const OSS_DEFAULT_ACCESS_KEY = "LTAIscopeboxTEST";
export const OSS_DEFAULT_SECRET = "ScopeboxOssTestSecret0123456789";

// The query parameters that are part of the CanonicalizedResource of a V1 signature; all others (prefix,
// max-keys, list-type, marker, …) are not signed. The list of the official Go SDK (aliyun-oss-go-sdk,
// oss/conn.go signKeyList), which is also what OSS checks; the Python (oss2) and C++ SDKs have the same
// entries for everything used here. ali-oss has no list: it signs what the caller puts in `subres`,
// e.g. listV2() puts 'continuation-token' there (and list-type, prefix, max-keys in the unsigned query),
// which matches this list.
export const SIGNED_SUBRESOURCES = new Set([
  "acl", "uploads", "location", "cors", "logging", "website", "referer", "lifecycle", "delete", "append",
  "tagging", "objectMeta", "uploadId", "partNumber", "security-token", "position", "img", "style", "styleName",
  "replication", "replicationProgress", "replicationLocation", "cname", "bucketInfo", "comp", "qos", "live",
  "status", "vod", "startTime", "endTime", "symlink", "x-oss-process", "response-content-type",
  "x-oss-traffic-limit", "response-content-language", "response-expires", "response-cache-control",
  "response-content-disposition", "response-content-encoding", "udf", "udfName", "udfImage", "udfId",
  "udfImageDesc", "udfApplication", "udfApplicationLog", "restore", "callback", "callback-var", "qosInfo",
  "policy", "stat", "encryption", "versions", "versioning", "versionId", "requestPayment", "x-oss-request-payer",
  "sequential", "inventory", "inventoryId", "continuation-token", "asyncFetch", "worm", "wormId", "wormExtend",
  "withHashContext", "x-oss-enable-md5", "x-oss-enable-sha1", "x-oss-enable-sha256", "x-oss-hash-ctx",
  "x-oss-md5-ctx", "transferAcceleration", "regionList", "cloudboxes", "x-oss-ac-source-ip",
  "x-oss-ac-subnet-mask", "x-oss-ac-vpc-id", "x-oss-ac-forward-allow", "metaQuery", "resourceGroup", "rtc",
  "x-oss-async-process", "responseHeader",
]);

// OSS error numbers ("EC") of the refusals modeled here, as listed in OSS's troubleshooting documentation.
const EC = {
  SignatureDoesNotMatch: "0002-00000040",
  expired: "0002-00000069",
  expiresMissing: "0002-00000068",
  expiresInvalid: "0002-00000070",
};

function isIpLiteral(host) {
  return /^\d{1,3}(\.\d{1,3}){3}$/.test(host) || host.startsWith("[") || host.includes(":");
}

// Virtual-hosted addressing: "Host: <bucket>.<endpoint>" names the bucket and the path is the key. A Host
// is taken as virtual-hosted when its first label is an existing bucket, or when the rest looks like an
// OSS endpoint (oss-<region>…, as ali-oss sends for an IP endpoint: "<bucket>.oss-cn-hangzhou.aliyuncs.com").
// Everything else (127.0.0.1:PORT, localhost:PORT, a name without dots, …) is path-style: /<bucket>/<key>.
export function ossBucketFromHost(hostHeader, buckets) {
  if (!hostHeader) return null;
  const host = hostHeader.toLowerCase().replace(/:\d+$/, "");
  if (isIpLiteral(host)) return null;
  const dot = host.indexOf(".");
  if (dot <= 0) return null;
  const label = host.slice(0, dot);
  if (buckets.has(label) || /^oss-/.test(host.slice(dot + 1))) return label;
  return null;
}

// Builds the authenticate(ctx) of OSS mode; server.mjs passes its helpers (it cannot be imported back).
export function makeOssAuth({ CONFIG, S3Error, authNow, headerValues, single, sameSignature }) {
  const bytes = (s) => `${[...Buffer.from(s, "utf8")].map((b) => b.toString(16).toUpperCase().padStart(2, "0")).join(" ")} `;

  function resourceOf(ctx) {
    if (ctx.bucket === undefined) return "/";
    return `/${ctx.bucket}/${ctx.key ?? ""}`;
  }

  // The signed sub-resources of the request, decoded, for signUtils.buildCanonicalizedResource ('' for
  // "?acl", which it writes without '=').
  function subResources(query) {
    const params = {};
    for (const name of Object.keys(query)) if (SIGNED_SUBRESOURCES.has(name)) params[name] = single(query, name);
    return Object.keys(params).length ? params : null;
  }

  // Content-MD5, Content-Type and the x-oss-* headers as received; the Date line is passed separately.
  function signedHeaders(headers) {
    const h = {};
    for (const [k, v] of Object.entries(headers)) if (k === "content-md5" || k === "content-type" || k.startsWith("x-oss-")) h[k] = v;
    return h;
  }

  function verify(ctx, headers, akid, provided, dateLine) {
    // ali-oss's own builder: VERB \n Content-MD5 \n Content-Type \n Date|Expires \n x-oss-headers resource[?subresources]
    const stringToSign = signUtils.buildCanonicalString(ctx.req.method, resourceOf(ctx), { headers: signedHeaders(headers), parameters: subResources(ctx.query) }, dateLine);
    ctx.stringToSign = stringToSign;
    const expected = signUtils.computeSignature(CONFIG.secretKey, stringToSign);
    if (!sameSignature(expected, provided))
      throw new S3Error(403, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your key and signing method.", [
        ["OSSAccessKeyId", akid],
        ["SignatureProvided", provided],
        ["StringToSign", stringToSign],
        ["StringToSignBytes", bytes(stringToSign)],
        ["EC", EC.SignatureDoesNotMatch],
      ]);
  }

  function checkAccessKey(akid) {
    if (akid !== CONFIG.accessKey)
      throw new S3Error(403, "InvalidAccessKeyId", "The OSS Access Key Id you provided does not exist in our records.", [["OSSAccessKeyId", akid]]);
  }

  return async function authenticateOss(ctx) {
    const { query } = ctx;
    const headers = headerValues(ctx.req);
    const authorization = headers.authorization;
    if (headers["x-oss-security-token"] !== undefined || Object.hasOwn(query, "security-token"))
      throw new S3Error(403, "InvalidAccessKeyId", "scopebox test server: STS security tokens are not supported.");
    if (authorization !== undefined) {
      ctx.auth = "header";
      if (/^OSS4-HMAC-SHA256 /.test(authorization))
        throw new S3Error(501, "NotImplemented", "scopebox test server: OSS V4 signatures (OSS4-HMAC-SHA256) are not implemented; use V1.");
      const m = /^OSS ([^:\s]+):(\S+)$/.exec(authorization);
      if (!m) throw new S3Error(400, "InvalidArgument", "Authorization header is invalid.", [["ArgumentName", "Authorization"], ["ArgumentValue", authorization]]);
      const [, akid, provided] = m;
      checkAccessKey(akid);
      ctx.accessKey = akid;
      // x-oss-date, when sent, replaces Date in the string to sign (it is signed again as an x-oss-* header).
      const dateLine = headers["x-oss-date"] ?? headers.date;
      const when = dateLine === undefined ? NaN : Date.parse(dateLine);
      if (Number.isNaN(when)) throw new S3Error(403, "AccessDenied", "OSS authentication requires a valid Date.");
      if (Math.abs(authNow() - when) > CONFIG.maxSkewMs)
        throw new S3Error(403, "RequestTimeTooSkewed", "The difference between the request time and the current time is too large.", [
          ["RequestTime", dateLine],
          ["ServerTime", new Date(authNow()).toISOString().replace(/\.\d{3}Z$/, ".000Z")],
          ["MaxAllowedSkewMilliseconds", String(CONFIG.maxSkewMs)],
        ]);
      return verify(ctx, headers, akid, provided, dateLine);
    }
    if (["OSSAccessKeyId", "Signature", "Expires"].some((n) => Object.hasOwn(query, n))) {
      ctx.auth = "presigned";
      const akid = single(query, "OSSAccessKeyId");
      const provided = single(query, "Signature");
      const expires = single(query, "Expires");
      if (!akid || !provided) throw new S3Error(403, "AccessDenied", "Query-string authentication requires the OSSAccessKeyId, Expires and Signature parameters.");
      if (expires === undefined || expires === "") throw new S3Error(403, "AccessDenied", "Expires parameter is missing.", [["EC", EC.expiresMissing]]);
      if (!/^\d+$/.test(expires)) throw new S3Error(403, "AccessDenied", "Invalid expires.", [["Expires", expires], ["EC", EC.expiresInvalid]]);
      checkAccessKey(akid);
      ctx.accessKey = akid;
      const now = authNow();
      if (now > Number(expires) * 1000)
        throw new S3Error(403, "AccessDenied", "Request has expired.", [
          ["Expires", new Date(Number(expires) * 1000).toISOString()],
          ["ServerTime", new Date(now).toISOString()],
          ["EC", EC.expired],
        ]);
      return verify(ctx, headers, akid, provided, expires);
    }
    ctx.auth = "anonymous";
    throw new S3Error(403, "AccessDenied", "You have no right to access this object because of bucket acl.");
  };
}
